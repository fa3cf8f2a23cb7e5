"""On a real Ray cluster (no GPU): a GPU actor is shown infeasible and raises
demand_infeasible within seconds, not after the pending threshold; a placement
group that waits names what holds its CPUs; and
the GPU processes the fake pynvml reports are joined to live actors, to the
children of actors, or called orphans."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from collectors.hostinfo import node_ip_address
from dashboard.celery import app as celery_app
from dashboard.cluster.models import Demand, Worker
from dashboard.core.scheduler import EmbeddedScheduler
from dashboard.gpus.detect import evaluate_resources
from dashboard.incidents.models import Incident
from tests.agents import report_gpus
from tests.conftest import wait_for
from tests.test_ray_nodes import poll_until

GIB = 1024**3
pytestmark = [pytest.mark.ray, pytest.mark.django_db]


@pytest.fixture
def driver(ray_settings, monkeypatch):  # type: ignore[no-untyped-def]
    import ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # ray.init() sets it for the process
    ray.init(address=ray_settings.gcs_address, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def api(user, path: str):  # type: ignore[no-untyped-def]
    client = APIClient()
    client.force_authenticate(user)
    return client.get(path).json()


def test_gpu_actor_is_infeasible_and_raises_an_incident(driver, settings, viewer) -> None:  # type: ignore[no-untyped-def]
    settings.INFEASIBLE_GRACE_S = 0

    @driver.remote(num_gpus=1)
    class Learner:
        pass

    learner = Learner.remote()
    try:
        demand = poll_until(lambda: Demand.objects.filter(kind="actor").first(),
                            "the pending GPU actor")
        assert demand.feasible is False
        assert "GPU: asks 1, no node has any" in demand.explanation
        [listed] = [d for d in api(viewer, "/api/demands/") if d["kind"] == "actor"]
        assert listed["bundles"][0]["GPU"] == 1.0 and listed["feasible"] is False
        evaluate_resources(timezone.now())
        incident = Incident.objects.get(kind="demand_infeasible", state=Incident.FIRING)
        assert "Learner" in incident.summary
    finally:
        driver.kill(learner)
    # Ray lists the actor's creation as a task shape too (CPU:1,GPU:1), and its cluster
    # status drops that shape a poll or two after the actor row goes: wait for both.
    poll_until(lambda: not any(bundle.get("GPU") for d in Demand.objects.all()
                               for bundle in d.bundles), "the GPU actor and its shape to go")
    evaluate_resources(timezone.now())
    assert not Incident.objects.filter(kind="demand_infeasible", state=Incident.FIRING).exists()


@pytest.mark.django_db(transaction=True)
def test_infeasible_actor_alerts_within_15_s(driver, settings) -> None:  # type: ignore[no-untyped-def]
    # The shipped cadence and thresholds, as settings.py writes them. A feasible demand
    # alerts only after PENDING_S: what opens within 15 s is the infeasible path.
    assert settings.PENDING_S > 15
    scheduler = EmbeddedScheduler(celery_app, {
        "ray": {"task": "dashboard.cluster.tasks.poll_ray_state",
                "schedule": settings.POLL_RAY_S},
        "detect": {"task": "dashboard.gpus.tasks.detect_resources",
                   "schedule": settings.DETECT_S},
    })
    scheduler.start()

    @driver.remote(num_gpus=1)
    class Learner:
        pass

    asked_at = timezone.now()
    learner = Learner.remote()
    try:
        incident = wait_for(
            lambda: Incident.objects.filter(kind="demand_infeasible",
                                            state=Incident.FIRING).first(),
            60, 0.25, "demand_infeasible")
        assert "Learner" in incident.summary
        assert (incident.opened_at - asked_at).total_seconds() <= 15
    finally:
        driver.kill(learner)
        scheduler.stop()


def test_waiting_placement_group_names_what_holds_its_cpus(driver, viewer) -> None:  # type: ignore[no-untyped-def]
    from ray.util.placement_group import placement_group, remove_placement_group

    @driver.remote(num_cpus=1)
    class Trainer:
        def ready(self) -> bool:
            return True

    trainers = [Trainer.remote() for _ in range(2)]
    driver.get([t.ready.remote() for t in trainers], timeout=60)
    group = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_PACK", name="rollout")
    try:
        # Ray's usage report trails by a few seconds: until it shows the CPUs taken,
        # the verdict is "free now, not placed yet".
        demand = poll_until(
            lambda: Demand.objects.filter(kind="placement_group",
                                          explanation__contains="held by").first(),
            "the waiting placement group to be explained")
        assert demand.feasible is True
        assert demand.explanation.startswith("waits for resources held by")
        assert "Trainer" in demand.explanation
        assert {b["label"].split()[1] for b in demand.blockers} == {"Trainer"}
        [listed] = api(viewer, "/api/demands/")
        assert listed["name"] == "rollout"
    finally:
        remove_placement_group(group)
        for trainer in trainers:
            driver.kill(trainer)


def test_gpu_processes_are_joined_to_ray_actors(driver, fake_gpus, settings, viewer) -> None:  # type: ignore[no-untyped-def]
    settings.NODE_IP = node_ip_address()  # the agent's host is the Ray node's host
    settings.ORPHAN_GRACE_S = 0

    @driver.remote(num_cpus=0)
    class Engine:
        def __init__(self) -> None:
            # A child process, as vLLM's engine or a DataLoader worker would be.
            self.child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])

        def pids(self) -> tuple[int, int]:
            import os

            return os.getpid(), self.child.pid

        def stop_child(self) -> None:
            self.child.kill()

    engine = Engine.options(name="vllm-engine").remote()
    actor_pid, child_pid = driver.get(engine.pids.remote(), timeout=60)
    # Not a child of this driver either: started through a shell that exits at once.
    launcher = subprocess.run(["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"],
                              capture_output=True, text=True, check=True)
    stranger = psutil.Process(int(launcher.stdout))
    try:
        poll_until(lambda: Worker.objects.filter(pid=actor_pid).exists(), "Ray's workers")
        fake_gpus.add_gpu(uuid="GPU-0", processes=[(actor_pid, 20 * GIB), (child_pid, 30 * GIB)])
        fake_gpus.add_gpu(uuid="GPU-1", processes=[(stranger.pid, 5 * GIB)])
        report_gpus()
        owners = {p["pid"]: p["owner"] for g in api(viewer, "/api/gpus/") for p in g["processes"]}
        assert owners[actor_pid]["kind"] == "actor"
        assert "vllm-engine" in owners[actor_pid]["label"]
        assert owners[child_pid]["kind"] == "actor"
        assert f"child pid {child_pid}" in owners[child_pid]["label"]
        assert owners[stranger.pid]["kind"] == "orphan"
        evaluate_resources(timezone.now())
        [orphan] = Incident.objects.filter(kind="gpu_orphan_memory", state=Incident.FIRING)
        assert orphan.subject == f"gpu_process:GPU-1/{stranger.pid}"
    finally:
        driver.get(engine.stop_child.remote(), timeout=60)
        driver.kill(engine)
        stranger.kill()
