from sglforge.cli.main import main

raise SystemExit(main())
