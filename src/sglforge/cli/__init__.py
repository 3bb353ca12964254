"""The `sglforge` command line (main.py parses; one module per verb group).

Importing it first checks that a TOML parser is importable (toml_check.py): every verb reads
TOML, and on Python 3.10 without `tomli` the user gets one line and exit status 2 rather than
a ModuleNotFoundError traceback.
"""

from sglforge.cli.toml_check import require_toml

require_toml()
