"""One audit trail for what people do to raywatch and through it. The actions app keeps
it (AuditEntry, append-only: /audit/, GET /api/audit/); the apps below it, which cannot
import it, say what an operator did here: an agent token issued, rotated or revoked, a
cluster added, approved or refused, a stack taken by hand. The actions app's receiver
(connected in its AppConfig.ready()) writes the entry, inside the act's own transaction:
an act whose entry cannot be written does not happen."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.dispatch import Signal

# What the trail names these acts (AuditEntry.kind): written once, here.
ISSUE_TOKEN, ROTATE_TOKEN, REVOKE_TOKEN = "issue_token", "rotate_token", "revoke_token"
ADD_CLUSTER, APPROVE_CLUSTER, REFUSE_CLUSTER = "add_cluster", "approve_cluster", "refuse_cluster"
TAKE_STACK = "take_stack"
KINDS = [(ISSUE_TOKEN, "issue agent token"), (ROTATE_TOKEN, "rotate agent token"),
         (REVOKE_TOKEN, "revoke agent token"), (ADD_CLUSTER, "add cluster"),
         (APPROVE_CLUSTER, "approve cluster"), (REFUSE_CLUSTER, "refuse cluster"),
         (TAKE_STACK, "take stack")]
# Who did it when no person did: a command on raywatch's own host.
COMMAND = "manage.py"

operator_act = Signal()  # send(sender=Act, act=Act)


@dataclass(frozen=True)
class Act:
    kind: str
    target_key: str  # token:<prefix>, cluster:<name>, trial:<experiment>/<id>
    at: datetime
    user: Any = None  # the person; None: a command on the server (COMMAND)
    address: str = ""  # where the request came from
    outcome: str = ""  # what came of it, in words
    target: dict[str, Any] = field(default_factory=dict)


def record(act: Act) -> None:
    """Write the act into the trail; raises when no trail is there to take it (an act
    that cannot be audited does not happen)."""
    if not operator_act.send(sender=Act, act=act):
        raise RuntimeError("no audit trail is connected (the actions app is not installed)")


def username(user: Any) -> str:
    return user.get_username() if user is not None and user.is_authenticated else COMMAND
