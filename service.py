"""Execution Proof Service: run the server or an operator / client command, from a clone.

python service.py                 # same as: serve
python service.py --help          # every command

Installed, the same command line is ``execution-proof`` (README "Command line").
"""

from __future__ import annotations

import sys

from execution_proof.cli.main import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], default_verb="serve"))
