"""Node tokens: issued (shown once), looked up by their hash, revoked. A token is
"rwa_" + 256 random bits; raywatch keeps its SHA-256, which needs no salt at that
entropy, and a short prefix to tell tokens apart on the Agents page."""

from __future__ import annotations

import logging
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from collectors.agent.wire import token_key
from dashboard.agents.models import NodeToken
from dashboard.cluster.models import Cluster
from dashboard.core.errors import ApiError

log = logging.getLogger("raywatch.agents")
PREFIX = "rwa_"
SEEN_EVERY_S = 5  # last_seen_at is written at most this often per token


def issue(node: str, user: Any, now: datetime, node_ip: str = "",
          cluster: str = "") -> tuple[NodeToken, str]:
    """A new token for `node` of `cluster` (a name; default: the cluster RAY_ADDRESS points
    at): the row and the token, which is never shown again."""
    node = node.strip()
    if not node or len(node) > 200:
        raise ApiError("a node name is needed (at most 200 characters)")
    in_cluster = {}
    if cluster.strip():
        found = Cluster.objects.filter(name=cluster.strip()).first()
        if found is None:
            known = ", ".join(Cluster.objects.values_list("name", flat=True)) or "none yet"
            raise ApiError(f"no cluster named {cluster.strip()!r} (known: {known})")
        in_cluster = {"cluster": found}
    token = PREFIX + secrets.token_urlsafe(32)
    row = NodeToken.objects.create(
        node=node, node_ip=node_ip.strip(), token_hash=token_key(token), prefix=token[:12],
        created_by=user if user and user.is_authenticated else None, created_at=now,
        **in_cluster)
    log.warning("agent token %s… issued for node %s by %s", row.prefix, node, _who(user))
    return row, token


def revoke(row: NodeToken, user: Any, now: datetime) -> bool:
    """Revoke a token; False if it already was."""
    if not NodeToken.objects.filter(pk=row.pk, revoked_at=None).update(
            revoked_at=now, revoked_by=_who(user)):
        return False
    log.warning("agent token %s… of node %s revoked by %s", row.prefix, row.node, _who(user))
    return True


def authenticate(header: str | None, address: str, now: datetime) -> NodeToken:
    """The live token in an `Authorization: Bearer rwa_…` header; 401 otherwise."""
    found = authenticate_many([(header, address)], now)[0]
    if isinstance(found, ApiError):
        raise found
    return found


def authenticate_many(requests: list[tuple[str | None, str]], now: datetime
                      ) -> list[NodeToken | ApiError]:
    """authenticate() of each (header, address), with one query for all of them: the
    token, or the 401 that refuses it."""
    keys = [_key(header) for header, _ in requests]
    rows = {row.token_hash: row for row in NodeToken.objects.filter(
        token_hash__in=[k for k in keys if k])} if any(keys) else {}
    found = []
    for key, (_, address) in zip(keys, requests, strict=True):
        row = rows.get(key) if key else None
        refused = _refusal(row, key)
        if refused is None and row is not None:
            _seen(row, address, now)
        found.append(refused or row)
    return found


def _key(header: str | None) -> str | None:
    scheme, _, token = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not token.startswith(PREFIX):
        return None
    return token_key(token.strip())


def _refusal(row: NodeToken | None, key: str | None) -> ApiError | None:
    if key is None:
        return ApiError("an agent authenticates with 'Authorization: Bearer <node token>'", 401)
    if row is None:
        return ApiError("unknown agent token", 401)
    if row.revoked_at is not None:
        return ApiError(f"this agent token was revoked at {row.revoked_at:%Y-%m-%d %H:%M} UTC",
                        401)
    return None


def _seen(row: NodeToken, address: str, now: datetime) -> None:
    if row.last_seen_at is None or now - row.last_seen_at > timedelta(seconds=SEEN_EVERY_S):
        NodeToken.objects.filter(pk=row.pk).update(last_seen_at=now, last_address=address)
        row.last_seen_at, row.last_address = now, address


def live_tokens(now: datetime | None = None) -> Any:
    """Tokens not revoked whose agent was heard from within AGENT_STALE_S."""
    fresh = (now or timezone.now()) - timedelta(seconds=settings.AGENT_STALE_S)
    return NodeToken.objects.filter(revoked_at=None, last_seen_at__gte=fresh)


def _who(user: Any) -> str:
    return user.get_username() if user and user.is_authenticated else "manage.py"
