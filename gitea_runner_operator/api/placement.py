"""``status.domain``: where one group is served under ``--sharding``. A value of the API,
so the status writer names it without reaching the sharding rules."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one group is served (``--sharding``): its domain, the replica that holds it,
    and whether the domain spans its whole Gitea."""

    domain: str
    served_by: str  # the replica's identity, its membership Lease's holderIdentity
    whole_gitea: bool
    # A global group whose polls do not work yet (its status is not Ready=True): a domain
    # of its own, so it may poll but must create nothing until every replica's layout has
    # joined it to its Gitea's domain (sharding/domains.py).
    probation: bool = False

    def status(self) -> dict[str, str]:
        """``status.domain``. Each field changes only with the domain or its owner, so a
        quiet group writes nothing for it (docs/gitops.md, "quiet status")."""
        return {
            "id": self.domain,
            "servedBy": self.served_by,
            "spans": "gitea" if self.whole_gitea else "family",
        }
