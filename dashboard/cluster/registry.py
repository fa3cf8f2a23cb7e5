"""The clusters raywatch watches besides the one RAY_ADDRESS points at: added by an admin
(`manage.py cluster add`, POST /api/clusters/), or announced by their head node's agent
and approved (or refused) by an admin."""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlparse

from django.conf import settings
from django.db import IntegrityError, transaction

from dashboard.cluster.endpoint import gcs_address
from dashboard.cluster.models import Cluster
from dashboard.core import audit
from dashboard.core.errors import ApiError

log = logging.getLogger(__name__)
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
ANNOUNCED_EVERY = timedelta(seconds=60)


def add_cluster(name: str, address: str, token: str, now: datetime, user: Any = None,
                gcs_address: str = "", client: str = "") -> Cluster:
    """A cluster an admin adds: its name (as pages, alerts and /metrics show it), its
    dashboard's URL (http://HEAD:8265), Ray's auth token if it wants one, and its GCS
    (HOST:PORT) if raywatch is to kill its actors (a trial on a node with no agent).
    Polled from the next Ray poll on."""
    name, address, token = name.strip(), address.strip().rstrip("/"), token.strip()
    gcs_address = _checked_gcs(gcs_address)
    if not NAME.match(name):
        raise ApiError(f"cluster name {name!r}: 1-100 letters, digits, '.', '_' or '-', "
                       "starting with a letter or digit")
    address = _checked_url(address)
    if name == settings.CLUSTER_NAME:
        raise ApiError(f"{name!r} is the cluster RAY_ADDRESS points at "
                       "(RAYWATCH_CLUSTER_NAME): give the other cluster a name of its own")
    try:
        with transaction.atomic():
            cluster = Cluster.objects.create(
                name=name, origin=Cluster.ADMIN, approval=Cluster.APPROVED, address=address,
                token=token, gcs_address=gcs_address, first_seen_at=now, state_since=now)
            audit.record(audit.Act(
                audit.ADD_CLUSTER, f"cluster:{name}", now, user, client,
                f"dashboard {address}" + (f", GCS {gcs_address}" if gcs_address else "")
                + (", with a Ray token" if token else ""), target=_target(cluster)))
    except IntegrityError:
        raise ApiError(f"a cluster named {name!r} exists already") from None
    log.warning("cluster %s (%s) added by %s", name, address, audit.username(user))
    return cluster


def _target(cluster: Cluster) -> dict[str, Any]:
    """What the trail keeps of a cluster: where it is polled, never its Ray token."""
    return {"name": cluster.name, "address": cluster.address,
            "gcs_address": cluster.gcs_address, "approval": cluster.approval}


# --- clusters their head node's agent announces ---------------------------------------------
def announce(token_prefix: str, head: Any, now: datetime) -> Cluster | None:
    """A node's agent says its node runs a Ray head (collectors/agent/headinfo.py). The
    cluster it heads is the one raywatch already knows by that session, KubeRay name or
    GCS address; else a new one, origin "registered", polled once an admin approves it
    (or at once with RAYWATCH_CLUSTERS_APPROVE=auto). A refused one stays refused.

    A known cluster's dashboard URL, GCS address and token are never changed here: they
    say where raywatch sends its Ray token, and any node token can announce. A GCS
    address or URL that differs from the cluster's is kept as its `claim`, for an admin
    to take or dismiss (`decide`)."""
    facts = _head(head)
    if facts is None:
        return None
    cluster = _known(facts)
    if cluster is None:
        auto = settings.CLUSTERS_APPROVE == "auto"
        try:
            with transaction.atomic():
                cluster = Cluster.objects.create(
                    name=_free_name(_name_for(facts)), origin=Cluster.REGISTERED,
                    approval=Cluster.APPROVED if auto else Cluster.PENDING,
                    address=facts["dashboard_url"], gcs_address=facts["gcs_address"],
                    kuberay=facts["kuberay"], session_hint=facts["session_name"],
                    announced_by=token_prefix[:16], announced_at=now,
                    last_error=facts["warning"], first_seen_at=now, state_since=now)
        except IntegrityError:
            return None  # announced twice at once: the other report made it
        log.warning("cluster %s announced by the agent %s… (%s): %s", cluster.name,
                    token_prefix, facts["dashboard_url"] or "no dashboard URL",
                    "polled (RAYWATCH_CLUSTERS_APPROVE=auto)" if auto else "waits for an admin")
        return cluster
    changes: dict[str, Any] = {}
    if cluster.session_hint != facts["session_name"]:
        changes["session_hint"] = facts["session_name"]
    if not cluster.kuberay and facts["kuberay"]:
        changes["kuberay"] = facts["kuberay"]
    claim = _claim(cluster, facts, token_prefix[:16], now)
    if claim != cluster.claim:
        changes["claim"] = claim
        if claim and not claim.get("decided"):
            log.warning("cluster %s: the agent %s… claims %s; an admin decides (cluster "
                        "approve)", cluster.name, token_prefix,
                        ", ".join(f"{k} {claim[k]}" for k in CLAIMED if k in claim))
    if cluster.origin == Cluster.REGISTERED and not cluster.announced_by:
        changes["announced_by"] = token_prefix[:16]
    # A head's agent announces at every report (once a second): the row is written when
    # what it says changes, and `announced_at` refreshed a minute at a time.
    if changes or cluster.announced_at is None or now - cluster.announced_at >= ANNOUNCED_EVERY:
        Cluster.objects.filter(pk=cluster.pk).update(announced_at=now, **changes)
    return cluster


def decide(name: str, approve: bool, now: datetime, user: Any = None, address: str = "",
           token: str | None = None, gcs_address: str = "", client: str = "") -> Cluster:
    """An admin approves (polled from the next Ray poll on; `address`, `token` and
    `gcs_address` set or replace its dashboard URL, Ray token and GCS) or refuses (never
    polled) a cluster. Either settles what its head's agent claimed: the same claim is
    not raised again. The agent that announced an approved cluster reports for it from
    then on."""

    cluster = Cluster.objects.filter(name=name).first()
    if cluster is None:
        raise ApiError(f"no cluster named {name!r}", 404)
    if cluster.name == settings.CLUSTER_NAME:
        raise ApiError(f"{name!r} is the cluster RAY_ADDRESS points at: always polled", 409)
    cluster.approval = Cluster.APPROVED if approve else Cluster.REFUSED
    if address.strip():
        cluster.address = _checked_url(address)
    if token is not None:
        cluster.token = token.strip()
    if gcs_address.strip():
        cluster.gcs_address = _checked_gcs(gcs_address)
    if cluster.claim:
        cluster.claim = {**cluster.claim, "decided": True}
    if approve and not cluster.address:
        raise ApiError(f"cluster {name!r} has no dashboard URL: give one (its head's "
                       "dashboard listens where raywatch cannot reach)", 400)
    with transaction.atomic():
        cluster.save()
        audit.record(audit.Act(
            audit.APPROVE_CLUSTER if approve else audit.REFUSE_CLUSTER, f"cluster:{name}",
            now, user, client,
            (f"polled at {cluster.address}" if approve else "never polled")
            + (", its Ray token set" if token is not None else ""), target=_target(cluster)))
    log.warning("cluster %s %s by %s", name, "approved" if approve else "refused",
                audit.username(user))
    return cluster


def _head(head: Any) -> dict[str, Any] | None:
    if not isinstance(head, dict):
        return None

    def text(key: str, limit: int) -> str:
        value = head.get(key)
        return value.strip()[:limit] if isinstance(value, str) else ""

    url, host = text("dashboard_url", 500), text("dashboard_host", 100)
    if url and urlparse(url).scheme not in ("http", "https"):
        url = ""
    raw = head.get("kuberay") if isinstance(head.get("kuberay"), dict) else {}
    kuberay = {k: str(raw[k])[:253] for k in ("name", "namespace")
               if isinstance(raw.get(k), str) and raw[k]}
    warning = (f"its dashboard listens on {host} only: raywatch on another host cannot "
               "reach it (start the head with --dashboard-host=0.0.0.0, or give its URL "
               "when approving)") if host in ("127.0.0.1", "localhost", "::1") else ""
    return {"dashboard_url": url, "gcs_address": text("gcs_address", 200),
            "session_name": text("session_name", 200), "kuberay": kuberay,
            "node_ip": text("node_ip", 64), "warning": warning}


CLAIMED = ("gcs_address", "dashboard_url")


def _claim(cluster: Cluster, facts: dict[str, Any], by: str, now: datetime) -> dict[str, Any]:
    """The claim `cluster` holds after this announcement: what differs from its GCS
    address and URL (the one it holds when the agent says the same again, decided or
    not), {} when nothing does. The cluster RAY_ADDRESS points at takes both from
    settings: nothing to claim."""
    if cluster.name == settings.CLUSTER_NAME:
        return {}
    held = {"gcs_address": cluster.gcs_address, "dashboard_url": cluster.address}
    said = {key: facts[key] for key in CLAIMED
            if facts[key] and facts[key].rstrip("/") != held[key].rstrip("/")}
    if not said:
        return {}
    if said == {key: cluster.claim[key] for key in CLAIMED if key in cluster.claim}:
        return cluster.claim
    return {**said, "by": by, "at": now.isoformat(), "decided": False}


def _known(facts: dict[str, Any]) -> Cluster | None:
    from dashboard.cluster.models import ClusterSession

    if facts["session_name"]:
        session = (ClusterSession.objects.select_related("cluster")
                   .filter(session_name=facts["session_name"]).order_by("-id").first())
        if session is not None:
            return session.cluster
        hinted = Cluster.objects.filter(session_hint=facts["session_name"]).first()
        if hinted is not None:
            return hinted
    if facts["kuberay"].get("name"):
        for cluster in Cluster.objects.exclude(kuberay={}):
            if cluster.kuberay == facts["kuberay"]:
                return cluster
    if facts["gcs_address"]:
        if facts["gcs_address"] == gcs_address():  # RAY_ADDRESS's, not polled yet
            return Cluster.objects.filter(name=settings.CLUSTER_NAME).first()
        found = Cluster.objects.filter(gcs_address=facts["gcs_address"]).first()
        if found is not None:
            return found
    if facts["dashboard_url"]:
        return (Cluster.objects.filter(dashboard_url=facts["dashboard_url"]).first()
                or Cluster.objects.filter(address=facts["dashboard_url"]).first())
    return None


def _name_for(facts: dict[str, Any]) -> str:
    kuberay = facts["kuberay"]
    if kuberay.get("name"):
        parts = [kuberay.get("namespace", ""), kuberay["name"]]
        base = ".".join(p for p in parts if p)
    else:
        base = f"head-{facts['node_ip'] or facts['gcs_address'] or 'unknown'}"
    base = re.sub(r"[^A-Za-z0-9._-]", "-", base).strip("-.") or "registered"
    return base[:90]


def _free_name(base: str) -> str:
    name, n = base, 1
    while Cluster.objects.filter(name=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def _checked_gcs(gcs_address: str) -> str:
    gcs_address = gcs_address.strip()
    host, _, port = gcs_address.rpartition(":")
    if gcs_address and (not host or not port.isdigit()):
        raise ApiError(f"GCS address {gcs_address!r}: HOST:PORT, as RAY_ADDRESS takes it")
    return gcs_address


def _checked_url(address: str) -> str:
    address = address.strip().rstrip("/")
    parsed = urlparse(address)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ApiError(f"address {address!r}: the cluster's dashboard URL, as "
                       "http://HEAD:8265 (Ray's Jobs CLI takes the same)")
    return address
