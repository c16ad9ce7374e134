"""The command line's one-shot commands beside the operator itself: ``why`` (why a job waits)
and the uninstall helpers (``drain-groups``, ``release-finalizers``)."""
