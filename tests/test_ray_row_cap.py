"""Past Ray's 10,000-row cap: with more live actors than one state API reply holds,
the Ray poll stores every one of them, once; what Ray cut and raywatch could not get
back is said in the status strip, with the numbers, and is not taken for dead.

Ray here is tests/raystandin.py, which answers like Ray 2.60's state API (its format
is checked against a real cluster in tests/test_ray_standin_format.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest

from dashboard.cluster.models import Actor
from dashboard.cluster.tasks import poll_ray_state
from dashboard.core.health import health_payload
from tests.raystandin import Cluster, RayStandIn, actor_row, cluster_of, worker_row

pytestmark = pytest.mark.django_db

Serve = Callable[..., AbstractContextManager[RayStandIn]]


@pytest.fixture
def serve(settings) -> Iterator[Serve]:  # type: ignore[no-untyped-def]
    """Point the Ray source at a stand-in serving `cluster`."""

    @contextmanager
    def run(cluster: Cluster, **limits: int) -> Iterator[RayStandIn]:
        stand_in = RayStandIn(cluster, **limits)
        with stand_in.running() as url:
            settings.RAY_ADDRESS = None
            settings.RAY_API_SERVER_ADDRESS = url
            settings.RAY_AUTH_TOKEN, settings.RAY_AUTH_TOKEN_PATH = None, None
            yield stand_in

    yield run


def ray_strip() -> dict:
    return next(item for item in health_payload() if item["source"] == "ray")


def stored_live_ids() -> list[str]:
    return list(Actor.objects.exclude(state="DEAD").values_list("actor_id", flat=True))


def test_20000_live_actors_are_all_stored_once(serve: Serve) -> None:
    cluster = cluster_of(live_actors=20_000, jobs=4, dead_actors=1_000)
    with serve(cluster) as ray:
        poll_ray_state()
    live = {a["actor_id"] for a in cluster.actors if a["state"] == "ALIVE"}
    stored = stored_live_ids()
    assert len(stored) == len(set(stored)) == 20_000  # nothing doubled
    assert set(stored) == live  # nothing dropped, no dead one among them
    # Ray cut the first list; the per-state and per-job lists stayed within the bound.
    assert 1 < ray.requests["/api/v0/actors"] <= 64
    strip = ray_strip()
    assert "actors" not in strip["reason"]
    # Every actor has its worker: 20,000 live workers, a list Ray cannot split.
    assert strip["state"] == "degraded"
    assert "truncated its workers list" in strip["reason"]
    assert "raywatch got 10,000 of the 20,000 Ray holds" in strip["reason"]


def test_actors_in_every_live_state_past_the_cap(serve: Serve) -> None:
    cluster = cluster_of(live_actors=240, jobs=3)
    for n, state in enumerate(("PENDING_CREATION", "RESTARTING", "DEPENDENCIES_UNREADY")):
        cluster.actors += [actor_row(1_000 * (n + 1) + i, cluster.jobs[i % 3]["job_id"], state)
                           for i in range(30)]
    cluster.workers = cluster.workers[:50]  # under the cap: the actors' lists are the point
    with serve(cluster, source_limit=100):  # the head's RAY_MAX_LIMIT_FROM_DATA_SOURCE=100
        poll_ray_state()
    assert sorted(stored_live_ids()) == sorted(a["actor_id"] for a in cluster.actors)
    assert ray_strip()["state"] == "healthy"


def test_what_ray_cut_is_said_and_not_taken_for_dead(serve: Serve) -> None:
    # One job with more ALIVE actors than Ray sends: no filter Ray applies before its
    # cut splits them further.
    cluster = cluster_of(live_actors=250, jobs=1)
    cluster.workers = [worker_row(a) for a in cluster.actors[:50]]
    with serve(cluster, source_limit=100):
        poll_ray_state()
        first = set(stored_live_ids())
        assert len(first) == 100
        cluster.actors.reverse()  # the GCS's order changes: another 100 come back
        poll_ray_state()
    stored = set(stored_live_ids())
    assert stored > first  # the first 100, still alive for raywatch, and more
    strip = ray_strip()
    assert strip["state"] == "degraded"
    assert "truncated its actors list" in strip["reason"]
    assert "raywatch got 100 of the 250 Ray holds" in strip["reason"]
    assert "workers" not in strip["reason"]


def test_under_the_cap_one_request_and_a_clean_strip(serve: Serve) -> None:
    cluster = cluster_of(live_actors=300, jobs=2, dead_actors=50)
    with serve(cluster, source_limit=1_000) as ray:
        poll_ray_state()
        cluster.actors = cluster.actors[100:]  # 100 actors end: Ray lists them no more
        cluster.workers = cluster.workers[100:]
        poll_ray_state()
    assert ray.requests["/api/v0/actors"] == 2  # one a poll
    assert len(stored_live_ids()) == 200
    assert Actor.objects.filter(state="DEAD").count() == 100
    assert ray_strip()["state"] == "healthy"
