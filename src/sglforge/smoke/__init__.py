"""The smoke test: install the wheels into a fresh venv, check the host, launch the PD pair
and the router, run checks through the router, report, and always tear down.

Pipeline (each step one module): profile → wheel set (wheel/wheelset.py) → install → doctor →
commands → processes → readiness → checks → report; `run.py` strings them together and calls
qualification (sglforge/qualification/) for equivalence, reference, gates and the receipt.
"""
