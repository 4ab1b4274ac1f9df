"""Execution Proof Service: run the server or an operator / client command.

python service.py                 # same as: serve
python service.py --help          # every command
"""

from __future__ import annotations

import sys

from cli.main import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
