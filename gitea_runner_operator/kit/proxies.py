"""Whether the environment's proxy settings apply to a URL: one rule for every HTTP client.

An aiohttp session that trusts the environment looks the proxy (and a netrc file) up again
in a thread on every request. That cost 1,000 quiet groups' polls a tenth of the
operator's CPU, and each Kubernetes request two hops through a thread and back to the event
loop: under issue 45's attacks each hop waited for a turn of the busy loop, on the way of
every runner create. So a client asks once, when it is made, and trusts the environment
only where a proxy applies.
"""

from __future__ import annotations

from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass


def proxied(url: str) -> bool:
    """Whether the environment sends requests to ``url`` through a proxy
    (``HTTPS_PROXY``/``HTTP_PROXY``, less ``NO_PROXY``), as aiohttp reads them."""
    parts = urlsplit(url)
    if parts.hostname is None or proxy_bypass(parts.hostname):
        return False
    return parts.scheme in getproxies()
