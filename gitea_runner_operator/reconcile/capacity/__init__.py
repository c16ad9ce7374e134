"""Capacity, pure: who competes for a Gitea's queued jobs (members, families), how each job
is handed to one group (accounting), and the book that keeps it all (ledger)."""
