"""Prometheus metrics: one :class:`Metrics` facade (``facade.py``) over the series of the
groups (``groups.py``), Gitea, Kubernetes, the work queue (``workqueue.py``), ``--sharding``
(``sharding.py``) and why jobs wait (``why.py``), named in ``names.py``. Importers use
``from gitea_runner_operator.metrics import X``."""

from gitea_runner_operator.metrics.facade import Metrics
from gitea_runner_operator.metrics.names import (
    CONTENT_TYPE,
    GROUP_LABELS,
    PREFIX,
    SEEN_JOBS_PER_GROUP,
    SEEN_JOBS_TTL,
    endpoint_class,
    kube_outcome,
    status_code_label,
)
from gitea_runner_operator.metrics.sharding import ShardingMetrics
from gitea_runner_operator.metrics.why import WhyMetrics
from gitea_runner_operator.metrics.workqueue import WorkQueueMetrics

__all__ = [
    "CONTENT_TYPE",
    "GROUP_LABELS",
    "PREFIX",
    "SEEN_JOBS_PER_GROUP",
    "SEEN_JOBS_TTL",
    "Metrics",
    "ShardingMetrics",
    "WhyMetrics",
    "WorkQueueMetrics",
    "endpoint_class",
    "kube_outcome",
    "status_code_label",
]
