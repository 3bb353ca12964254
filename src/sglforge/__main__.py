from sglforge.cli import main

raise SystemExit(main())
