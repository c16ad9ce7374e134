"""The poll task, one per group: it observes Gitea, then reaps, enrolls, re-runs and keeps the
group's hook, and hands each observation to the reconcile. All Gitea I/O of a group is here."""
