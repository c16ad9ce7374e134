"""Which kind markers each folder of tests/ sets. One table, read by the conftest hook that
marks collected tests and by the unit test that checks no module claims another kind."""

from __future__ import annotations

from pathlib import PurePath

# The markers a kind implies: an e2e test also needs the testbed, so it is an integration
# test too (``-m "not integration and not e2e"`` selects the unit suite either way).
FOLDER_KINDS: dict[str, frozenset[str]] = {
    "unit": frozenset(),
    "integration": frozenset({"integration"}),
    "faults": frozenset({"integration", "faults"}),
    "e2e": frozenset({"integration", "e2e"}),
    "real_node": frozenset({"integration", "e2e", "real_node"}),
    # a real Flux (source- and kustomize-controller) applying Git to the testbed
    "gitops": frozenset({"integration", "gitops"}),
    "testbed": frozenset({"integration"}),  # the testbed's own smoke tests
    "benchmarks": frozenset({"integration"}),  # scripts; they collect no tests
}
KIND_MARKERS = frozenset({"integration", "e2e", "faults", "real_node", "gitops"})


def kinds_of(path: PurePath) -> frozenset[str]:
    """The kind markers for a file at ``path`` (relative to tests/): its top folder's."""
    top = path.parts[0] if len(path.parts) > 1 else ""
    return FOLDER_KINDS.get(top, frozenset())
