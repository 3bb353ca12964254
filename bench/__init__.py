"""Benchmarks of the costs users feel (`nox -s bench`); see bench/README.md."""
