"""Experiments: each takes a typed point and returns a typed record (see records.py)."""
