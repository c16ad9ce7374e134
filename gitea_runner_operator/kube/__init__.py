"""Cluster I/O: watches, the informer caches, writes, Secrets and ConfigMaps."""
