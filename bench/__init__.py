"""Benchmarks: each module runs on its own (``.venv/bin/python bench/<name>.py``) and prints figures."""
