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
