"""`ray stop; ray start` under a running raywatch (the same cluster name, a new session on
a new GCS port): the old session ends as an ended cluster does. Its nodes and its trials
are history, not failures: no node_dead, no trial_process_gone, nothing critical; the new
session is watched as the cluster's own."""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from collectors.localray import LocalRay
from dashboard.celery import app as celery_app
from dashboard.cluster.models import ClusterSession, Node
from dashboard.cluster.sessions import SESSION_ENDED
from dashboard.core.scheduler import EmbeddedScheduler
from dashboard.incidents.models import Incident
from dashboard.trials.models import Trial
from tests.conftest import POLL_S, start_search, stop_node, wait_for

pytestmark = [pytest.mark.ray, pytest.mark.beside, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def heads(tmp_path: Path) -> Iterator[Callable[[], LocalRay]]:
    """Local clusters of this test's own (each with a Ray temp dir of its own), stopped
    after it."""
    started: list[LocalRay] = []
    temp_dirs: list[Path] = []

    def start() -> LocalRay:
        temp_dirs.append(Path(tempfile.mkdtemp(prefix="rwr-", dir="/tmp")))
        local = LocalRay(tmp_path / f"ray-{len(started)}.json", num_cpus=2,
                         temp_dir=temp_dirs[-1], log_monitor=False)
        started.append(local)
        return local

    yield start
    for local in started:
        local.stop()
    for temp_dir in temp_dirs:
        shutil.rmtree(temp_dir, ignore_errors=True)


def point_at(settings, cluster, storage: Path) -> None:  # type: ignore[no-untyped-def]
    settings.RAY_ADDRESS = None
    settings.RAY_API_SERVER_ADDRESS = cluster.dashboard_url
    settings.RAY_GCS_ADDRESS = cluster.gcs_address
    settings.LOG_DIRS = [str(storage), str(Path(cluster.session_dir) / "artifacts")]


def test_a_restarted_cluster_raises_nothing_critical(  # type: ignore[no-untyped-def]
        settings, tmp_path, heads, monkeypatch) -> None:
    start = heads
    storage = tmp_path / "ray_results"
    storage.mkdir()
    # The clusters' temporary files (TMPDIR: their dashboards' pymp-* dirs), to see that a
    # stopped cluster leaves none. Short: a socket's path lives in it.
    temporary = Path(tempfile.mkdtemp(prefix="rwq-", dir="/tmp"))
    monkeypatch.setenv("TMPDIR", str(temporary))
    settings.POLL_LOGS_S = settings.POLL_RAY_S = POLL_S
    settings.STALL_MIN_S, settings.GONE_GRACE_S, settings.DETECT_S = 6.0, 3.0, POLL_S
    first_head = start()
    first = first_head.start(log_path=tmp_path / "ray-0.log")
    point_at(settings, first, storage)
    scheduler = EmbeddedScheduler(celery_app, {
        "ray": {"task": "dashboard.cluster.tasks.poll_ray_state", "schedule": POLL_S},
        "logs": {"task": "dashboard.trials.tasks.poll_trial_logs", "schedule": POLL_S},
        "detect": {"task": "dashboard.gpus.tasks.detect_resources", "schedule": POLL_S},
    })
    scheduler.start()
    name = f"restart-{uuid.uuid4().hex[:6]}"
    search = start_search(first, storage, name, "restart")
    try:
        wait_for(lambda: Trial.objects.filter(experiment__name=name, process_alive=True,
                                              iteration__gte=3).count() == 2,
                 120, 0.5, "both trials to run")
        old_nodes = set(Node.objects.values_list("node_id", flat=True))
        first_head.stop()  # `ray stop`: the head, its trials and the driver go
        left = [p.name for p in temporary.glob("pymp-*")]
        shutil.rmtree(temporary)
        assert not left, f"the stopped cluster left its dashboard's {left}"
        second = start().start(log_path=tmp_path / "ray-1.log")  # `ray start --head`
        point_at(settings, second, storage)
        wait_for(lambda: ClusterSession.objects.filter(ended_at__isnull=True).exclude(
            session_name=Path(first.session_dir).name).exists(), 60, 0.5, "the new session")
        # Long enough for every rule to have looked: the gone grace, the stall limit (the
        # trials' last results came before the old head stopped, longer ago than this).
        wait_for(lambda: Node.objects.filter(state=Node.ALIVE).exists(), 30, 0.5,
                 "the new head's node")
        time.sleep(2 * settings.STALL_MIN_S)
    finally:
        scheduler.stop()
        stop_node(search)
    opened = list(Incident.objects.values_list("kind", "severity", "subject"))
    assert not [o for o in opened if o[0] == "node_dead"], opened
    # The dying driver's error.txt waited for Ray's verdict (a new session): no alert.
    assert not [o for o in opened if o[0] == "trial_errored"], (opened, [
        (t.trial_id, t.error_read_at, t.error_text[-600:]) for t in Trial.objects.all()])
    firing = list(Incident.objects.filter(state=Incident.FIRING).values_list(
        "kind", "severity", "subject"))
    assert not [f for f in firing if f[1] == "critical"], firing
    assert not [f for f in firing if f[0] in ("node_dead", "trial_process_gone",
                                              "trial_stalled")], firing
    ended = Node.objects.filter(node_id__in=old_nodes)
    assert {(n.state, n.state_message) for n in ended} == {(Node.DEAD, SESSION_ENDED)}
    assert Node.objects.filter(state=Node.ALIVE).exclude(node_id__in=old_nodes).count() == 1
