"""The caps of everything a tenant writes: one home for every count, length, depth and byte
bound of the tenant edge (issue 36), so the table in docs/security.md and the code cannot
drift apart (tests/unit/project/test_caps_table.py holds them to each other).

A tenant reaches one process that serves every team: through its RunnerGroup spec, the Pods
and Jobs of its namespace, the answers of the Gitea it names and its runnerConfig. Bytes
alone do not bound what the operator then keeps or computes (5,900 two-character labels per
job fit in a page of bytes; a 1 MiB template parses again on every pass), so each value has
a cap that fits what real Gitea and Kubernetes produce, and past it the value is refused,
never cut short and kept in part.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Final

from pydantic import AfterValidator, Field

from gitea_runner_operator.kit.jsonlimits import too_deep

# -- the RunnerGroup spec -------------------------------------------------------------------
# A runs-on is a handful of labels; a group offering 64 serves any real workflow.
SPEC_LABELS_MAX: Final = 64
# ``name:docker://registry/path/image:tag@sha256:...``: a Docker reference is at most 255
# characters of name, 128 of tag and 71 of digest; 512 holds the name, schema and all that.
LABEL_MAX_CHARS: Final = 512
IMAGE_MAX_CHARS: Final = 1024
URL_MAX_CHARS: Final = 2048
# Kubernetes object names and ConfigMap or Secret keys (DNS subdomain: 253).
K8S_NAME_MAX_CHARS: Final = 253
# Gitea owner and repository names (api/refs.py's GITEA_NAME says 100 as a pattern too).
GITEA_NAME_MAX_CHARS: Final = 100
DURATION_MAX_CHARS: Final = 32
QUANTITY_MAX_CHARS: Final = 64
SCHEMAS_MAX: Final = 8
RUNNERS_MAX: Final = 10_000
# A PodTemplateSpec nests about ten levels (affinity terms are the deepest); a real one is a
# few KiB. Checked before anything walks it recursively.
TEMPLATE_MAX_DEPTH: Final = 32
# Any value of a spec, measured before pydantic sees it: an enum or a string field given a
# list nested 2,000 deep made pydantic's error path recurse past the limit (RecursionError,
# not a refusal naming the field). No field of a real spec nests as deep as its template.
SPEC_VALUE_MAX_DEPTH: Final = TEMPLATE_MAX_DEPTH
TEMPLATE_MAX_BYTES: Final = 256 * 1024
# spec.cache.resources: a ResourceRequirements (limits, requests, claims).
RESOURCES_MAX_DEPTH: Final = 4
RESOURCES_MAX_BYTES: Final = 4 * 1024

# -- a Gitea's (or Forgejo's) answers, per listed job or runner -------------------------------
JOB_LABELS_MAX: Final = 64
JOB_LABEL_MAX_CHARS: Final = 256
# ``<spec.gitea.url>/api/v1/repos/owner/repo/actions/jobs/id``: the group's URL (at most
# URL_MAX_CHARS), owner and repository 100 characters each, and the rest.
JOB_URL_MAX_CHARS: Final = 2560
# Gitea stores job and runner names as VARCHAR(255).
ANSWER_NAME_MAX_CHARS: Final = 255
ANSWER_STATUS_MAX_CHARS: Final = 32
# A Forgejo runner's description (Forgejo's own limit is a TEXT column; ours says enough).
ANSWER_DESCRIPTION_MAX_CHARS: Final = 4096
HANDLE_MAX_CHARS: Final = 256
RUNNER_LABELS_MAX: Final = 64

# -- the informer caches: what is kept of a Pod's or Job's metadata ---------------------------
# Values of the labels and annotations kept (Kubernetes caps a label value at 63; ours are
# names and comma-joined runner labels).
KEPT_VALUE_MAX_CHARS: Final = 4096

# -- spec.runnerConfig ----------------------------------------------------------------------
RUNNER_CONFIG_MAX_BYTES: Final = 64 * 1024
RUNNER_CONFIG_MAX_DEPTH: Final = 32
# Verdicts remembered by content hash (one line of text each, and a 32-byte key).
RUNNER_CONFIG_VERDICTS: Final = 1024


@dataclass(frozen=True, slots=True)
class JsonBound:
    """A free-form object (a Pod template kept as written) bounded in depth and in bytes of
    compact JSON: depth first, without recursion, so a deep one cannot raise RecursionError
    in whatever walks it next."""

    max_bytes: int
    max_depth: int

    def __call__(self, value: Any) -> Any:
        if too_deep(value, self.max_depth):
            raise ValueError(f"nests deeper than {self.max_depth} levels")
        size = len(json.dumps(value, separators=(",", ":"), default=str).encode())
        if size > self.max_bytes:
            raise ValueError(f"holds more than {self.max_bytes} bytes of JSON")
        return value


def bounded_object(max_bytes: int, max_depth: int) -> AfterValidator:
    return AfterValidator(JsonBound(max_bytes, max_depth))


SpecLabel = Annotated[str, Field(max_length=LABEL_MAX_CHARS)]
JobLabel = Annotated[str, Field(max_length=JOB_LABEL_MAX_CHARS)]
K8sName = Annotated[str, Field(max_length=K8S_NAME_MAX_CHARS)]
Duration = Annotated[str, Field(max_length=DURATION_MAX_CHARS)]
