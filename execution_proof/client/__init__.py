"""The client library (docs/python-api.md): what ``execution_proof`` exports to a Python program,
and what the command line (``cli/``) is built on. A layer of its own between ``cli/`` and
the rest: it imports the pure core (``receipts/``) and nothing of the server (the layer
contract in pyproject.toml). Modules load what they need when it is first used, so that
``import execution_proof`` stays cheap (bench/RESULTS.md, "The client").
"""
