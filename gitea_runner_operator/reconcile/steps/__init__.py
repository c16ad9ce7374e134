"""The steps of one reconcile pass, one a module: each reads the pass, asks the rules in
reconcile/ and acts through the Kubernetes ports (reconcile/ports.py)."""
