"""The moving parts: work queue, per-group Gitea pollers, informers wiring and leadership."""
