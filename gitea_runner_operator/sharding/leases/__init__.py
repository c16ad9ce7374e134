"""The Lease I/O of sharding: each replica's membership Lease, the thread that renews it,
and the rounds that read every member's and take or release domains."""
