"""Kubernetes objects built and read without I/O: the runner Job, the cache server, the views a
reconcile reads. kube/ sends and watches them; nothing here awaits."""
