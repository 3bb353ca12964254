import sys

if sys.version_info < (3, 10):  # noqa: UP036 - before any import that needs 3.10 syntax (X | Y at runtime)
    print(
        f"error: sglforge needs Python 3.10 or newer; this is Python "
        f"{sys.version_info[0]}.{sys.version_info[1]} ({sys.executable}).\n"
        "hint: run nox (or sglforge) with a newer Python, e.g. `python3.12 -m pip install nox "
        "&& python3.12 -m nox …`; 3.10 also needs `pip install tomli`",
        file=sys.stderr,
    )
    sys.exit(2)  # a refused host (README "Exit status")

from sglforge.cli.main import main  # after the version check

raise SystemExit(main())
