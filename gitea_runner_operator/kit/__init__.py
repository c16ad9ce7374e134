"""Generic helpers that know nothing of Gitea or Kubernetes (ground floor, pure)."""
