"""The moving parts around the reconcile: the work queue, the wiring of informers, poll tasks\nand reconciles (controller), and leadership."""
