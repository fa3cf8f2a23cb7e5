"""What every detector returns: a Finding, turned into an incident by service.sync_findings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Finding:
    kind: str
    subject: str
    severity: str
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    # The cluster its subject is in (a Cluster pk); None: its trial's, else the cluster
    # RAY_ADDRESS points at. Two clusters may have subjects of the same name.
    cluster_id: int | None = None
