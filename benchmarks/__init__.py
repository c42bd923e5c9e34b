"""Benchmarks run by hand (``python -m benchmarks.<name>``); results go in RESULTS.md."""
