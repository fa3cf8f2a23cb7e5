"""The cluster raywatch watches has sessions (one per start of its Ray head) and outlives
its Ray: a restarted head is a new session and ends the one before; a cluster that stops
answering is unreachable, then ended, with everything stored of it still there; one that
answers again is active again. Real Ray names its real session; the restarts and the
teardown are played by tests/raystandin.py (its /api/version is checked against a real
cluster in tests/test_ray_standin_format.py)."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from django.db import connection
from django.utils import timezone

from dashboard.cluster.models import Actor, Cluster, ClusterSession, Node
from dashboard.cluster.tasks import poll_ray_state
from dashboard.core.models import SourceHealth
from tests.conftest import token_client
from tests.raystandin import RayStandIn, cluster_of

pytestmark = [pytest.mark.both_backends, pytest.mark.django_db]
FIRST, SECOND, THIRD = (f"session_2026-11-24_0{h}-00-00_00000{h}_4242" for h in (1, 2, 3))


def point_at(settings, url: str) -> None:  # type: ignore[no-untyped-def]
    settings.RAY_ADDRESS = None
    settings.RAY_API_SERVER_ADDRESS = url
    settings.RAY_AUTH_TOKEN, settings.RAY_AUTH_TOKEN_PATH = None, None


def sessions() -> list[tuple[str, bool, str]]:
    """(name, ended, why), oldest first."""
    return [(s.session_name, s.ended_at is not None, s.end_reason)
            for s in ClusterSession.objects.order_by("first_seen_at", "id")]


def identity(viewer) -> dict:  # type: ignore[no-untyped-def]
    reply = token_client(viewer).get("/api/cluster/")
    assert reply.status_code == 200
    return reply.json()["identity"]


def test_the_real_cluster_is_named_with_its_session(ray_settings, viewer) -> None:  # type: ignore[no-untyped-def]
    poll_ray_state()
    cluster = Cluster.objects.get()
    assert (cluster.state, cluster.ray_version) == (Cluster.ACTIVE, "2.60.0")
    assert sessions() == [(Path(ray_settings.session_dir).name, False, "")]
    shown = identity(viewer)
    assert shown["name"] == cluster.name and shown["state"] == "active"
    assert shown["sessions"][0]["session_name"] == Path(ray_settings.session_dir).name


def test_a_restarted_head_is_a_new_session_and_a_lost_one_ends(settings, viewer) -> None:  # type: ignore[no-untyped-def]
    settings.CLUSTER_ENDED_S = 1800
    ray = RayStandIn(cluster_of(live_actors=3, jobs=1))
    ray.session_name = FIRST
    with ray.running() as url:
        point_at(settings, url)
        poll_ray_state()
        poll_ray_state()  # the same session: still one
        assert sessions() == [(FIRST, False, "")]
        ray.session_name = SECOND  # the head restarted at the same address
        poll_ray_state()
    assert sessions() == [(FIRST, True, f"the head restarted: a new session, {SECOND}"),
                          (SECOND, False, "")]
    nodes = Node.objects.count()
    assert nodes > 0

    # Ray gone: unreachable at once, ended after RAYWATCH_CLUSTER_ENDED_S of silence.
    poll_ray_state()
    cluster = Cluster.objects.get()
    assert cluster.state == Cluster.UNREACHABLE and cluster.last_error
    last_answer = cluster.last_seen_at
    with time_machine.travel(timezone.now() + timedelta(minutes=20), tick=False):
        poll_ray_state()
    assert Cluster.objects.get().state == Cluster.UNREACHABLE
    with time_machine.travel(timezone.now() + timedelta(minutes=31), tick=False):
        poll_ray_state()
    cluster = Cluster.objects.get()
    assert cluster.state == Cluster.ENDED and cluster.ended_at == last_answer
    assert "no answer since" in cluster.end_reason and "31 min" in cluster.end_reason
    assert sessions()[-1] == (SECOND, True, "its cluster stopped answering")
    # Everything stored of it stays, and the page's data says it ended.
    assert Node.objects.count() == nodes
    shown = identity(viewer)
    assert shown["state"] == "ended" and shown["end_reason"] == cluster.end_reason
    assert [s["session_name"] for s in shown["sessions"]] == [SECOND, FIRST]

    # Back, with a new head: active again, a third session.
    ray.session_name = THIRD
    with ray.running() as url:
        point_at(settings, url)
        poll_ray_state()
    cluster = Cluster.objects.get()
    assert (cluster.state, cluster.ended_at, cluster.end_reason) == (Cluster.ACTIVE, None, "")
    assert [name for name, ended, _ in sessions() if not ended] == [THIRD]


def test_a_cluster_that_never_answered_is_unreachable_not_ended(settings, viewer) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, "http://127.0.0.1:9")  # nothing listens there
    poll_ray_state()
    with time_machine.travel(timezone.now() + timedelta(days=2), tick=False):
        poll_ray_state()
    cluster = Cluster.objects.get()
    assert cluster.state == Cluster.UNREACHABLE and cluster.ended_at is None
    assert "127.0.0.1:9" in cluster.last_error
    assert identity(viewer)["sessions"] == []


@pytest.mark.django_db(transaction=True)
def test_two_polls_at_once_store_the_cluster_once(settings, caplog) -> None:  # type: ignore[no-untyped-def]
    """Two Celery workers may run the Ray poll at once (beat does not wait for the last
    one): the second stores nothing instead of racing the first to create the same new
    node, which failed with IntegrityError and a traceback in the worker's log."""
    ray = RayStandIn(cluster_of(live_actors=50, jobs=2))
    both = threading.Barrier(2)
    # Both polls have all of Ray's replies before either stores anything.
    ray.on_request = lambda path: both.wait(10) if path == "/nodes" else None
    errors: list[BaseException] = []

    def poll() -> None:
        try:
            poll_ray_state()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    with ray.running() as url:
        point_at(settings, url)
        threads = [threading.Thread(target=poll) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert not errors
    # The poll records its failures instead of raising them: they are in the log.
    assert "failed" not in caplog.text, caplog.text[-3000:]
    assert SourceHealth.objects.get(source="ray", scope="").state == "healthy"
    assert Node.objects.count() == 1
    assert Actor.objects.count() == 50
    assert sessions() == [(ray.session_name, False, "")]
