"""The moving parts around the reconcile: the work queue, the wiring of informers, poll tasks
and reconciles (controller), and leadership."""
