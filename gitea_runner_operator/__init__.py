"""Elastic, ephemeral Gitea Actions runners for Kubernetes."""

from gitea_runner_operator.kit.lazyimport import make_lazy
from gitea_runner_operator.kit.tlsbuffer import bound_tls_read_buffer

__version__ = "0.1.0"

# Memory, before anything else runs (docs/benchmarks.md, Memory):
# - kubernetes_asyncio's generated client package would import every API and model it has
#   (946 modules, about 30 MB of RSS); lazily, only those used;
# - each TLS connection (one per watch) would hold a 256 KiB read buffer; 32 KiB.
for _package in ("kubernetes_asyncio.client", "kubernetes_asyncio.client.models"):
    make_lazy(_package)
bound_tls_read_buffer()
