"""Elastic, ephemeral Gitea Actions runners for Kubernetes."""

__version__ = "0.1.0"
