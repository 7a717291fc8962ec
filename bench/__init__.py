"""Benchmarks: scripts that print their figures (`python bench/<name>.py`)."""
