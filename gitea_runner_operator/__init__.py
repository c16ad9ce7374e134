"""Elastic, ephemeral Gitea Actions runners for Kubernetes.

Importing the package changes nothing in the process; the entry point (cli.py) sets the
process's memory bounds (kit/frugal.py)."""

__version__ = "0.1.0"
