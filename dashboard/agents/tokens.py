"""Node tokens: issued (shown once), looked up by their hash, rotated, revoked. A token
is "rwa_" + 256 random bits; raywatch keeps its SHA-256, which needs no salt at that
entropy, a short prefix to tell tokens apart on the Agents page, and the key that signs
its commands, sealed (sealing.py). A token may expire (RAYWATCH_AGENT_TOKEN_EXPIRES_DAYS);
a rotated one keeps working beside its successor for RAYWATCH_AGENT_TOKEN_OVERLAP_S,
then stops."""

from __future__ import annotations

import logging
import secrets
import time
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from collectors.agent.wire import command_key, token_key
from dashboard.agents import sealing
from dashboard.agents.models import NodeToken
from dashboard.cluster.models import Cluster
from dashboard.core import audit
from dashboard.core.errors import ApiError

log = logging.getLogger("raywatch.agents")
PREFIX = "rwa_"
SEEN_EVERY_S = 5  # last_seen_at is written at most this often per token
# A report's token, once found live, lets its next reports' bodies in without a query
# this long (each report is still authenticated with its group: `authenticate_many`).
ADMIT_FOR_S = 10.0
_admitted: dict[str, float] = {}  # token hash -> time.monotonic() it is admitted until
ADMITTED_AT_MOST = 10_000


def issue(node: str, user: Any, now: datetime, node_ip: str = "", cluster: str = "",
          expires_days: float | None = None, address: str = "") -> tuple[NodeToken, str]:
    """A new token for `node` of `cluster` (a name; default: the cluster RAY_ADDRESS points
    at), valid `expires_days` (default RAYWATCH_AGENT_TOKEN_EXPIRES_DAYS; 0: for ever):
    the row and the token, which is never shown again."""
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
    with transaction.atomic():
        row, token = _new(node, node_ip.strip(), user, now, expires_days, **in_cluster)
        audit.record(audit.Act(
            audit.ISSUE_TOKEN, f"token:{row.prefix}", now, user, address,
            f"for node {node}" + (f" of cluster {cluster.strip()}" if in_cluster else "")
            + (f", expires {row.expires_at:%Y-%m-%d %H:%M} UTC" if row.expires_at
               else ", never expires"), target=_target(row)))
    log.warning("agent token %s… issued for node %s by %s", row.prefix, node, _who(user))
    return row, token


def _target(row: NodeToken) -> dict[str, Any]:
    """What the trail keeps of a token: never the token, nor its hash."""
    return {"prefix": row.prefix, "node": row.node, "node_ip": row.node_ip,
            "cluster_id": row.cluster_id}


def _new(node: str, node_ip: str, user: Any, now: datetime, expires_days: float | None,
         **fields: Any) -> tuple[NodeToken, str]:
    token = PREFIX + secrets.token_urlsafe(32)
    days = settings.AGENT_TOKEN_EXPIRES_DAYS if expires_days is None else expires_days
    if days < 0:
        raise ApiError("a token expires after a number of days, 0 for never")
    row = NodeToken.objects.create(
        node=node, node_ip=node_ip, token_hash=token_key(token), prefix=token[:12],
        # Derived here, the one time raywatch holds the token: never from its hash.
        command_key_sealed=sealing.seal(command_key(token)),
        expires_at=now + timedelta(days=days) if days else None,
        created_by=user if user and user.is_authenticated else None, created_at=now,
        **fields)
    return row, token


def rotate(row: NodeToken, user: Any, now: datetime, overlap_s: float | None = None,
           expires_days: float | None = None, address: str = "") -> tuple[NodeToken, str]:
    """A new token for `row`'s node, shown once; `row` keeps working `overlap_s` (default
    RAYWATCH_AGENT_TOKEN_OVERLAP_S) while its agent is given the new one, then stops
    (sooner if it expires sooner)."""
    refused = _refusal(row, row.token_hash, now)
    if refused is not None:
        raise ApiError(f"token {row.prefix}… cannot be rotated ({refused.message}): issue "
                       "a new one", 409)
    if row.replaced_by_id is not None:
        raise ApiError(f"token {row.prefix}… was rotated already: rotate the token that "
                       "replaced it", 409)
    overlap = settings.AGENT_TOKEN_OVERLAP_S if overlap_s is None else overlap_s
    if overlap < 0:
        raise ApiError("the overlap is a number of seconds, 0 or more")
    ends = now + timedelta(seconds=overlap)
    ends = min(ends, row.expires_at) if row.expires_at is not None else ends
    with transaction.atomic():
        new, token = _new(row.node, row.node_ip, user, now, expires_days,
                          cluster_id=row.cluster_id, ray_node_id=row.ray_node_id)
        if not NodeToken.objects.filter(pk=row.pk, replaced_by=None, revoked_at=None).update(
                expires_at=ends, replaced_by=new):
            raise ApiError(f"token {row.prefix}… was rotated or revoked meanwhile", 409)
        audit.record(audit.Act(
            audit.ROTATE_TOKEN, f"token:{row.prefix}", now, user, address,
            f"{new.prefix}… replaces it; it stops at {ends:%Y-%m-%d %H:%M:%S} UTC",
            target={**_target(row), "replaced_by": new.prefix}))
    row.expires_at, row.replaced_by = ends, new
    log.warning("agent token %s… of node %s rotated by %s: %s… replaces it; the old one "
                "stops at %s UTC", row.prefix, row.node, _who(user), new.prefix, f"{ends:%H:%M:%S}")
    return new, token


def revoke(row: NodeToken, user: Any, now: datetime, address: str = "") -> bool:
    """Revoke a token; False if it already was."""
    with transaction.atomic():
        if not NodeToken.objects.filter(pk=row.pk, revoked_at=None).update(
                revoked_at=now, revoked_by=_who(user)):
            return False
        audit.record(audit.Act(audit.REVOKE_TOKEN, f"token:{row.prefix}", now, user, address,
                               "its agent is refused from its next request",
                               target=_target(row)))
    log.warning("agent token %s… of node %s revoked by %s", row.prefix, row.node, _who(user))
    return True


def authenticate(header: str | None, address: str, now: datetime) -> NodeToken:
    """The live token in an `Authorization: Bearer rwa_…` header; 401 otherwise."""
    found = authenticate_many([(header, address)], now)[0]
    if isinstance(found, ApiError):
        raise found
    return found


def admitted_lately(header: str | None) -> bool:
    """The report's token was found live by admit() within ADMIT_FOR_S (no query)."""
    key = _key(header)
    return key is not None and _admitted.get(key, 0.0) > time.monotonic()


def admit(header: str | None, now: datetime) -> ApiError | None:
    """Whether a report may send its body: None when its token is live, else the 401 (the
    report route asks before it reads a byte of the body). A token found live is let in
    without a query for ADMIT_FOR_S (admitted_lately); the report is authenticated with
    its group anyway."""
    key = _key(header)
    row = NodeToken.objects.filter(token_hash=key).first() if key else None
    refused = _refusal(row, key, now)
    if refused is None and key is not None:
        if len(_admitted) >= ADMITTED_AT_MOST:
            _admitted.clear()
        _admitted[key] = time.monotonic() + ADMIT_FOR_S
    return refused


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
        refused = _refusal(row, key, now)
        if refused is None and row is not None:
            _seen(row, address, now)
        found.append(refused or row)
    return found


def _key(header: str | None) -> str | None:
    scheme, _, token = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not token.startswith(PREFIX):
        return None
    return token_key(token.strip())


def _refusal(row: NodeToken | None, key: str | None, now: datetime) -> ApiError | None:
    if key is None:
        return ApiError("an agent authenticates with 'Authorization: Bearer <node token>'", 401)
    if row is None:
        return ApiError("unknown agent token", 401)
    if row.revoked_at is not None:
        return ApiError(f"this agent token was revoked at {row.revoked_at:%Y-%m-%d %H:%M} UTC",
                        401)
    if row.expires_at is not None and now >= row.expires_at:
        rotated = ("; it was rotated: give the agent the token issued to replace it"
                   if row.replaced_by_id else "; an admin issues a new one")
        return ApiError(f"this agent token expired at {row.expires_at:%Y-%m-%d %H:%M:%S} UTC"
                        f"{rotated}", 401)
    return None


def usable(now: datetime) -> QuerySet[NodeToken]:
    """Tokens neither revoked nor expired."""
    return NodeToken.objects.filter(Q(expires_at=None) | Q(expires_at__gt=now), revoked_at=None)


def _seen(row: NodeToken, address: str, now: datetime) -> None:
    if row.last_seen_at is None or now - row.last_seen_at > timedelta(seconds=SEEN_EVERY_S):
        NodeToken.objects.filter(pk=row.pk).update(last_seen_at=now, last_address=address)
        row.last_seen_at, row.last_address = now, address


def live_tokens(now: datetime | None = None) -> Any:
    """Tokens neither revoked nor expired whose agent was heard from within AGENT_STALE_S."""
    now = now or timezone.now()
    fresh = now - timedelta(seconds=settings.AGENT_STALE_S)
    return usable(now).filter(last_seen_at__gte=fresh)


def _who(user: Any) -> str:
    return audit.username(user)
