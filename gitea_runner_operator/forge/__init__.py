"""The Gitea client: typed payloads, errors that become conditions, retries and pagination."""
