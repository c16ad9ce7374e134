"""The read buffer of every asyncio TLS connection, bounded.

Why: CPython's asyncio TLS protocol (``asyncio.sslproto.SSLProtocol``, 3.11+) allocates a
256 KiB read buffer per connection, filled (so resident) at once. The operator holds one TLS
connection per watch (three per watched namespace) plus its pools: with 50 namespaces, about
350 connections and 40 MB of buffers at 1,000 groups, more than its informer caches. A TLS
record carries at most 16 KiB, so a 32 KiB buffer reads every record in one call; big
answers (a list of thousands of Jobs) arrive in more, smaller reads.
"""

from __future__ import annotations

import asyncio.sslproto

# Two TLS records (16 KiB of plaintext each at most).
TLS_READ_BUFFER = 32 * 1024


def bound_tls_read_buffer(size: int = TLS_READ_BUFFER) -> None:
    """Make every asyncio TLS connection opened from now on read into ``size`` bytes.
    Leaves a Python whose asyncio has no such knob alone."""
    protocol = getattr(asyncio.sslproto, "SSLProtocol", None)
    if protocol is not None and isinstance(getattr(protocol, "max_size", None), int):
        protocol.max_size = size
