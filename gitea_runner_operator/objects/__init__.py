"""Kubernetes objects built and read without I/O: the runner Job, the cache server, the views a
reconcile reads and what the informer caches keep of each object (slim). kube/ sends and
watches them; nothing here awaits."""
