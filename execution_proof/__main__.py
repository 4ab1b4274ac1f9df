"""``python -m execution_proof VERB ...``: the same command line as ``execution-proof``."""

from __future__ import annotations

from execution_proof.cli.main import run

if __name__ == "__main__":
    run()
