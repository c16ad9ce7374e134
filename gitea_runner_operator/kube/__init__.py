"""Cluster I/O and the pure translations between cluster objects and plain data."""
