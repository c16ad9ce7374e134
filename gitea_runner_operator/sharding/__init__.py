"""Sharding (``--sharding``): which replica serves which capacity domain, and where a
delivery for a group served elsewhere goes. The files here are pure rules; ``leases/`` holds
the membership Leases and each replica's rounds over them."""
