"""The Gitea client: typed payloads, errors that become conditions, retries and pagination,
and the requests of one observation (observe.py)."""
