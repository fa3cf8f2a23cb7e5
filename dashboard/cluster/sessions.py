"""The cluster raywatch watches and its sessions (Ray's session_name: one per start of the
head). A poll that answers notes its session: a new name ends the session before it (the
head restarted; its nodes, actors and pids are then gone, and the Ray poll marks them so).
A poll that fails makes the cluster unreachable, and after RAYWATCH_CLUSTER_ENDED_S of that,
ended: its rows stay, browsable, and it comes back active if it answers again."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from collectors.records import RaySession
from dashboard.cluster.models import Cluster, ClusterSession, Node
from dashboard.core.templatetags.rw import age

# Why a node is DEAD when it went with its whole session: no node_dead alarm for it.
SESSION_ENDED = "its session ended: the head restarted"


@contextmanager
def held(now: datetime, name: str | None = None) -> Iterator[Cluster | None]:
    """A cluster's row (default: the one RAY_ADDRESS points at) for one poll's writes, in
    one transaction. On Postgres it is locked, and a second poll of the same cluster gets
    None and stores nothing: two Celery workers polling at once raced to create the same
    new node (IntegrityError). The embedded scheduler never polls one cluster twice at
    once (SQLite has no row locks)."""
    with transaction.atomic():
        yield _claim(now, name or settings.CLUSTER_NAME)


def _claim(now: datetime, name: str) -> Cluster | None:
    mine = Cluster.objects.select_for_update(skip_locked=True).filter(name=name).first()
    if mine is not None:
        return mine
    if Cluster.objects.filter(name=name).exists():
        return None  # there, and held by another poll
    cluster, _ = Cluster.objects.get_or_create(
        name=name, defaults={"first_seen_at": now, "state_since": now})
    return Cluster.objects.select_for_update().get(pk=cluster.pk)


def note_answer(cluster: Cluster, session: RaySession, dashboard_url: str,
                now: datetime) -> bool:
    """The cluster answered as `session`; True when that changed what an operator sees
    (a new session, the cluster back from unreachable or ended)."""
    # Since when its head did not answer (a poll failed), if it did not: the session
    # that answered before ended by then.
    down_since = cluster.state_since if cluster.state == Cluster.UNREACHABLE else None
    changed = _reachable(cluster, session, dashboard_url, now)
    current = cluster.sessions.filter(ended_at__isnull=True).first()
    if current is not None and current.session_name == session.session_name:
        current.last_seen_at = now
        current.save(update_fields=["last_seen_at"])
        return changed
    if current is not None:
        _end_session(current, f"the head restarted: a new session, {session.session_name}",
                     down_since)
        # Its nodes went with it (the new session's raylets have new ids): history, as
        # when a cluster ends, not nodes that died one by one.
        # Nodes Ray already called dead as the head went ("expected termination") too.
        Node.objects.filter(cluster=cluster).exclude(state=Node.DEAD).update(
            state=Node.DEAD, state_message=SESSION_ENDED, ended_at=current.last_seen_at,
            updated_at=now)
        Node.objects.filter(cluster=cluster, ended_at__gte=current.first_seen_at).exclude(
            state_message=SESSION_ENDED).update(state_message=SESSION_ENDED, updated_at=now)
    row, created = ClusterSession.objects.get_or_create(
        cluster=cluster, session_name=session.session_name,
        defaults={"ray_version": session.ray_version or "", "first_seen_at": now,
                  "ray_commit": session.ray_commit or "", "last_seen_at": now})
    if not created:  # a session thought over answers again
        row.ended_at, row.end_reason, row.last_seen_at = None, "", now
        row.save(update_fields=["ended_at", "end_reason", "last_seen_at"])
    return True


def note_failure(cluster: Cluster, error: str, now: datetime) -> bool:
    """The cluster did not answer; True when its state changed. One that never answered
    is unreachable, never ended: there is nothing of it that could have ended."""
    if cluster.state == Cluster.ACTIVE:
        cluster.state, cluster.state_since = Cluster.UNREACHABLE, now
    elif cluster.state == Cluster.UNREACHABLE and cluster.last_seen_at is not None and \
            now - cluster.last_seen_at >= timedelta(seconds=settings.CLUSTER_ENDED_S):
        _end(cluster, now)
    else:
        return _save_error(cluster, error)
    cluster.last_error = error[:2000]
    cluster.save()
    return True


def _end(cluster: Cluster, now: datetime) -> None:
    since = cluster.last_seen_at
    cluster.state, cluster.state_since, cluster.ended_at = Cluster.ENDED, now, since
    cluster.end_reason = (f"its head was lost or the cluster torn down: no answer since "
                          f"{since:%Y-%m-%d %H:%M:%S} UTC ({age((now - since).total_seconds())})"
                          if since else "")
    current = cluster.sessions.filter(ended_at__isnull=True).first()
    if current is not None:
        _end_session(current, "its cluster stopped answering")
    # What Ray last said of its nodes is history now, not their state.
    Node.objects.filter(cluster=cluster).exclude(state=Node.DEAD).update(
        state=Node.DEAD, state_message="its cluster ended", ended_at=since or now,
        updated_at=now)


def _end_session(session: ClusterSession, reason: str,
                 found_down: datetime | None = None) -> None:
    """It ended by its last answer, or, when a poll found its head not answering after
    that, by then: its trials reported up to the moment the head went, which on a loaded
    machine can be seconds after the last poll that it answered (trials/detect.py,
    of_ended_session)."""
    ended = max(session.last_seen_at, found_down) if found_down else session.last_seen_at
    session.ended_at, session.end_reason = ended, reason
    session.save(update_fields=["ended_at", "end_reason"])


def _reachable(cluster: Cluster, session: RaySession, dashboard_url: str,
               now: datetime) -> bool:
    back = cluster.state != Cluster.ACTIVE or cluster.last_seen_at is None
    if back:
        cluster.state, cluster.state_since = Cluster.ACTIVE, now
        cluster.ended_at, cluster.end_reason, cluster.last_error = None, "", ""
    cluster.last_seen_at, cluster.dashboard_url = now, dashboard_url[:500]
    cluster.ray_version = session.ray_version or cluster.ray_version
    cluster.save()
    return back


def _save_error(cluster: Cluster, error: str) -> bool:
    if cluster.last_error != error[:2000]:
        cluster.last_error = error[:2000]
        cluster.save(update_fields=["last_error"])
    return False


def current_cluster() -> Cluster | None:
    """The cluster RAY_ADDRESS points at, once raywatch has polled it."""
    return Cluster.objects.filter(name=settings.CLUSTER_NAME).first()


def added_clusters() -> list[Cluster]:
    """The clusters to poll besides the one RAY_ADDRESS points at: every approved one with
    an address (ended ones too: a cluster that comes back is seen again)."""
    others = Cluster.objects.filter(approval=Cluster.APPROVED).exclude(address="").exclude(
        name=settings.CLUSTER_NAME)
    return list(others)
