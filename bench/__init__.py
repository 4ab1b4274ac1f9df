"""The benchmark harness (not a test): ``python -m bench``; see bench/run.py and bench/RESULTS.md."""
