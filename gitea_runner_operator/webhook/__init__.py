"""Gitea webhook fast path: verify ``workflow_job`` deliveries and wake the groups they concern.

A delivery is a trigger, never a count: polling stays the single source of truth, so a lost or
duplicated delivery changes nothing but latency. The interface to the rest of the operator is
narrow: :class:`WebhookServer` takes ``groups()`` (current :class:`GroupDescriptor` values),
``wake(key)`` and a per-group secret provider.
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
