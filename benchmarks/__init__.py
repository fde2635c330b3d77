"""Measurements over real code (speed in run.py, quality in quality/); importable for tests."""
