"""The demo: sglforge's whole flow on a small example project shipped in the repository
(`nox -s demo`, or `python -m demo`; see demo/__main__.py)."""
