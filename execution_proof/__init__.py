"""Execution Proof Service: signed, chained execution receipts for client-computed hashes.

The one import name the installed distribution puts into site-packages. In the repository
its subpackages are the design card's top-level folders (``receipts/``, ``runtime/``,
``kv/``, ``jobs/``, ``web/``, ``cli/``) and ``static/``, linked here; the wheel holds them
under ``execution_proof/`` (README "Layout").
"""
