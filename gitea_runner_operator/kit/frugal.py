"""The process's memory bounds, set once by the entry point (cli.py) before any module
imports the Kubernetes client (docs/benchmarks.md, Memory).

Why here and not on import of the package: they change the process (``sys.modules`` and
asyncio's TLS protocol), which a program that only imports a module of the operator, or a
test, must not have done to it behind its back.
"""

from __future__ import annotations

from gitea_runner_operator.kit.lazyimport import make_lazy
from gitea_runner_operator.kit.tlsbuffer import bound_tls_read_buffer

# kubernetes_asyncio's generated client package would import every API and model it has
# (946 modules, about 30 MB of RSS); lazily, only those used.
LAZY_PACKAGES = ("kubernetes_asyncio.client", "kubernetes_asyncio.client.models")


def bound_process_memory() -> None:
    """Import the Kubernetes client's modules on first use, and give each TLS connection (one
    per watch) a 32 KiB read buffer instead of 256 KiB. Call before the client is imported:
    a package already imported is left as it is."""
    for package in LAZY_PACKAGES:
        make_lazy(package)
    bound_tls_read_buffer()
