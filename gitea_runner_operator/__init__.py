"""Elastic, ephemeral Gitea Actions runners for Kubernetes."""

from gitea_runner_operator.kit.lazyimport import make_lazy

__version__ = "0.1.0"

# Before any module imports kubernetes_asyncio: its generated client package would import
# every API and model it has (946 modules, about 30 MB of RSS); lazily, only those used.
for _package in ("kubernetes_asyncio.client", "kubernetes_asyncio.client.models"):
    make_lazy(_package)
