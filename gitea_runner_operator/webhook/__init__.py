"""Gitea webhook fast path: verify ``workflow_job`` deliveries and wake the groups they concern.

A delivery is a trigger, never a count: polling stays the single source of truth, so a lost or
duplicated delivery changes nothing but latency. A delivery passes guard, verify, route and
dispatch, one way (server.py); the receiver reaches the rest of the operator through one
port, :class:`~.ports.Operator`, implemented once (runtime/webhook_port.py).
"""

from gitea_runner_operator.webhook.descriptors import Descriptors, descriptor_from_object
from gitea_runner_operator.webhook.routing import GroupDescriptor, SecretLocation, route
from gitea_runner_operator.webhook.secrets import CachedSecretReader, SecretProvider
from gitea_runner_operator.webhook.server import WebhookServer

__all__ = [
    "CachedSecretReader",
    "Descriptors",
    "GroupDescriptor",
    "SecretLocation",
    "SecretProvider",
    "WebhookServer",
    "descriptor_from_object",
    "route",
]
