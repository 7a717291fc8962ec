"""Benchmarks: scripts that print their figures (run as `python bench/<name>.py` or `python -m bench.<name>`)."""
