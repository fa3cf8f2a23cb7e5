"""The GPU and resource detectors on stored state, with the fake pynvml feeding the
GPUs: each opens the incident an operator needs and resolves it when the condition
clears. Ray's side is stored rows here (the real-cluster tests cover collecting it)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from collectors.records import DemandRecord
from dashboard.cluster.models import Actor, Demand, Node
from dashboard.cluster.workload import ingest_demands
from dashboard.gpus.detect import evaluate_resources
from dashboard.gpus.models import Gpu, GpuProcess
from dashboard.incidents.models import Incident
from dashboard.trials.models import Experiment, Trial
from tests.agents import report_gpus
from tests.conftest import mark_ray_current

GIB = 1024**3
pytestmark = [pytest.mark.both_backends, pytest.mark.django_db]


def firing(kind: str) -> list[Incident]:
    return list(Incident.objects.filter(kind=kind, state=Incident.FIRING))


def node(node_id: str = "node-1", ip: str = "10.0.0.5", gpus: float = 0, cpus: float = 2,
         **extra) -> Node:  # type: ignore[no-untyped-def]
    resources = {"CPU": {"total": cpus, "used": extra.pop("cpu_used", 0.0)}}
    if gpus:
        resources["GPU"] = {"total": gpus, "used": 0.0}
    return Node.objects.create(node_id=node_id, node_ip=ip, state=extra.pop("state", "ALIVE"),
                               resources=resources, last_seen_at=timezone.now(), **extra)


def actor(pid: int, state: str = "ALIVE", node_id: str = "node-1", **extra) -> Actor:  # type: ignore[no-untyped-def]
    now = timezone.now()
    return Actor.objects.create(actor_id=f"actor{pid:08d}", state=state, pid=pid,
                                node_id=node_id, repr_name=extra.pop("repr_name", "Learner"),
                                first_seen_at=now, updated_at=now, **extra)


def running_trial(pid: int, last_result_ago_s: float, iteration: int = 3) -> Trial:
    experiment = Experiment.objects.create(name="grpo")
    return Trial.objects.create(
        experiment=experiment, trial_id="abc_00000", status=Trial.RUNNING, node_ip="10.0.0.5",
        pid=pid, iteration=iteration,
        last_result_at=timezone.now() - timedelta(seconds=last_result_ago_s))


def idle_for(seconds: float, held_for: float | None = None) -> None:
    """The GPUs idle for `seconds`, their processes on them for `held_for` (as long)."""
    now = timezone.now()
    Gpu.objects.update(idle_since=now - timedelta(seconds=seconds))
    GpuProcess.objects.update(first_seen_at=now - timedelta(seconds=held_for or seconds))


def test_idle_gpus_during_a_step_raise_an_incident_on_the_trial(fake_gpus, settings) -> None:  # type: ignore[no-untyped-def]
    settings.IDLE_GPU_S = 300
    node()
    actor(5000)
    trial = running_trial(5000, last_result_ago_s=900)
    fake_gpus.add_gpu(uuid="GPU-0", util=0, processes=[(5000, 40 * GIB)])
    fake_gpus.add_gpu(uuid="GPU-1", util=1, processes=[(5000, 40 * GIB)])
    mark_ray_current()
    report_gpus()
    evaluate_resources(timezone.now())
    assert firing("gpu_idle_during_step") == []  # idle for a moment only
    idle_for(400)
    evaluate_resources(timezone.now())
    [incident] = firing("gpu_idle_during_step")
    assert incident.trial == trial
    assert incident.experiment == "grpo"
    assert "step 4" in incident.summary and "6 min" in incident.summary
    assert set(incident.details["gpus"]) == {"GPU-0", "GPU-1"}
    fake_gpus.set_gpu(1, util=90)  # one GPU busy again: the step is working
    report_gpus()
    evaluate_resources(timezone.now())
    assert firing("gpu_idle_during_step") == [incident]  # until it has worked a while
    Incident.objects.update(updated_at=timezone.now() - timedelta(
        seconds=settings.IDLE_GPU_CLEAR_S + 1))
    evaluate_resources(timezone.now())
    assert firing("gpu_idle_during_step") == []
    assert Incident.objects.get(kind="gpu_idle_during_step").state == Incident.RESOLVED


def test_a_trial_idling_through_every_step_has_one_incident_until_it_stops(  # type: ignore[no-untyped-def]
    fake_gpus, settings
) -> None:
    """A judge behind a rate-limited API: each step idles the GPU for minutes, then a
    result arrives and the GPU works for a moment. One incident for the pattern, held
    across the steps, not one opened and resolved per step; it resolves when the trial
    stops."""
    settings.IDLE_GPU_S, settings.IDLE_GPU_CLEAR_S = 60, 300
    node()
    actor(5000)
    trial = running_trial(5000, last_result_ago_s=200)
    fake_gpus.add_gpu(uuid="GPU-0", util=0, processes=[(5000, 40 * GIB)])
    mark_ray_current()
    report_gpus()
    idle_for(200)
    evaluate_resources(timezone.now())
    [incident] = firing("gpu_idle_during_step")
    for step in (4, 5, 6):
        # The step ends: a result, the GPU busy for a moment, then idle through the next.
        Trial.objects.filter(pk=trial.pk).update(iteration=step, last_result_at=timezone.now())
        fake_gpus.set_gpu(0, util=95)
        report_gpus()
        evaluate_resources(timezone.now())
        fake_gpus.set_gpu(0, util=0)
        report_gpus()
        idle_for(20)
        evaluate_resources(timezone.now())
        assert firing("gpu_idle_during_step") == [incident], f"step {step + 1}"
        Trial.objects.filter(pk=trial.pk).update(
            last_result_at=timezone.now() - timedelta(seconds=200))
        idle_for(200)
        evaluate_resources(timezone.now())
        assert firing("gpu_idle_during_step") == [incident], f"step {step + 1}"
    assert f"step {6 + 1}" in Incident.objects.get(pk=incident.pk).summary
    assert Incident.objects.filter(kind="gpu_idle_during_step").count() == 1
    Trial.objects.filter(pk=trial.pk).update(status="TERMINATED")
    evaluate_resources(timezone.now())
    assert Incident.objects.get(pk=incident.pk).state == Incident.RESOLVED


def test_idle_gpu_with_results_arriving_is_not_a_hung_step(fake_gpus, settings) -> None:  # type: ignore[no-untyped-def]
    settings.IDLE_GPU_S = 300
    node()
    actor(5000)
    running_trial(5000, last_result_ago_s=10)
    fake_gpus.add_gpu(uuid="GPU-0", util=0, processes=[(5000, 40 * GIB)])
    mark_ray_current()
    report_gpus()
    idle_for(3600)
    evaluate_resources(timezone.now())
    assert firing("gpu_idle_during_step") == []


def test_gpu_idle_before_the_trial_took_it_is_not_idle_during_its_step(  # type: ignore[no-untyped-def]
    fake_gpus, settings
) -> None:
    """A free GPU idles for an hour; a trial that started 30 s ago has not reported yet.
    Its step has not idled for IDLE_GPU_S: only once it has is the GPU idle during it."""
    settings.IDLE_GPU_S = 60
    node()
    actor(5000)
    trial = running_trial(5000, last_result_ago_s=0)
    Trial.objects.filter(pk=trial.pk).update(last_result_at=None, iteration=None)
    fake_gpus.add_gpu(uuid="GPU-0", util=0, processes=[(5000, 40 * GIB)])
    mark_ray_current()
    report_gpus()
    idle_for(3600, held_for=30)
    evaluate_resources(timezone.now())
    assert firing("gpu_idle_during_step") == []
    idle_for(3600, held_for=90)
    evaluate_resources(timezone.now())
    [incident] = firing("gpu_idle_during_step")
    assert "for 90 s while step 1 is in progress" in incident.summary


def test_process_of_no_ray_worker_is_an_orphan(fake_gpus, settings, viewer) -> None:  # type: ignore[no-untyped-def]
    settings.ORPHAN_GRACE_S = 60
    node()
    actor(5000)
    fake_gpus.add_gpu(uuid="GPU-0", processes=[(5000, 10 * GIB), (6000, 20 * GIB)])
    mark_ray_current()
    report_gpus()
    evaluate_resources(timezone.now())
    assert firing("gpu_orphan_memory") == []  # within the grace: Ray may not list it yet
    GpuProcess.objects.update(first_seen_at=timezone.now() - timedelta(seconds=61))
    evaluate_resources(timezone.now())
    [incident] = firing("gpu_orphan_memory")
    assert incident.subject == "gpu_process:GPU-0/6000"
    assert "20.0 GiB" in incident.summary and "no live Ray worker" in incident.summary
    assert incident.node_ip == "10.0.0.5"


def test_process_left_by_a_dead_actor_is_an_orphan_named_after_it(fake_gpus, settings) -> None:  # type: ignore[no-untyped-def]
    settings.ORPHAN_GRACE_S = 0
    node()
    actor(5000, state="DEAD", repr_name="VllmEngine", ended_at=timezone.now())
    fake_gpus.add_gpu(uuid="GPU-0", processes=[(5000, 70 * GIB)])
    mark_ray_current()
    report_gpus()
    evaluate_resources(timezone.now())
    [incident] = firing("gpu_orphan_memory")
    assert "dead actor VllmEngine" in incident.summary


def test_no_orphan_verdict_while_ray_is_not_current(fake_gpus, settings) -> None:  # type: ignore[no-untyped-def]
    settings.ORPHAN_GRACE_S = 0
    node()
    fake_gpus.add_gpu(uuid="GPU-0", processes=[(6000, 20 * GIB)])
    mark_ray_current(at=timezone.now() - timedelta(minutes=10))
    report_gpus()
    evaluate_resources(timezone.now())
    assert firing("gpu_orphan_memory") == []


def test_ray_told_a_different_gpu_count_than_nvml_sees(fake_gpus) -> None:  # type: ignore[no-untyped-def]
    ray_node = node(gpus=4)
    fake_gpus.add_gpu(uuid="GPU-0")
    fake_gpus.add_gpu(uuid="GPU-1")
    mark_ray_current()
    report_gpus()
    evaluate_resources(timezone.now())
    [incident] = firing("gpu_count_mismatch")
    assert "told 4 GPUs, NVML sees 2" in incident.summary
    ray_node.resources["GPU"]["total"] = 2
    ray_node.save()
    evaluate_resources(timezone.now())
    assert firing("gpu_count_mismatch") == []


def test_gpu_memory_full_for_a_while(fake_gpus, settings) -> None:  # type: ignore[no-untyped-def]
    settings.GPU_MEMORY_HIGH_S = 300
    fake_gpus.add_gpu(uuid="GPU-0", mem_used=79 * GIB, mem_total=80 * GIB)
    report_gpus()
    evaluate_resources(timezone.now())
    assert firing("gpu_memory_high") == []
    Gpu.objects.update(memory_high_since=timezone.now() - timedelta(seconds=301))
    evaluate_resources(timezone.now())
    [incident] = firing("gpu_memory_high")
    assert "98.8%" in incident.summary


def test_ecc_errors_and_thermal_throttling(fake_gpus) -> None:  # type: ignore[no-untyped-def]
    fake_gpus.add_gpu(uuid="GPU-0", ecc_uncorrected=2)
    fake_gpus.add_gpu(uuid="GPU-1", throttle_mask=0x40)  # hw_thermal_slowdown
    fake_gpus.add_gpu(uuid="GPU-2", throttle_mask=0x4)  # sw_power_cap: normal under load
    report_gpus()
    evaluate_resources(timezone.now())
    incidents = {i.subject: i for i in firing("gpu_hardware")}
    assert set(incidents) == {"gpu:GPU-0", "gpu:GPU-1"}
    assert incidents["gpu:GPU-0"].severity == "critical"
    assert "uncorrected ECC" in incidents["gpu:GPU-0"].summary
    assert "hw_thermal_slowdown" in incidents["gpu:GPU-1"].summary


def test_gpu_actor_on_a_gpu_less_cluster_is_infeasible(settings) -> None:  # type: ignore[no-untyped-def]
    settings.PENDING_S = 120
    node(cpus=8)
    now = timezone.now()
    ingest_demands([DemandRecord(kind="actor", key="a1", name="Learner",
                                 bundles=({"GPU": 1.0, "CPU": 1.0},))], now - timedelta(minutes=5))
    mark_ray_current()
    evaluate_resources(now)
    [incident] = firing("demand_infeasible")
    assert incident.severity == "critical"
    assert "actor Learner" in incident.summary
    assert "GPU: asks 1, no node has any" in incident.summary


def test_infeasible_demand_alerts_after_a_short_grace_not_the_pending_time(settings) -> None:  # type: ignore[no-untyped-def]
    settings.PENDING_S = 120
    settings.INFEASIBLE_GRACE_S = 5
    node(cpus=8)
    now = timezone.now()
    ingest_demands([
        DemandRecord(kind="actor", key="a1", name="Learner", bundles=({"GPU": 1.0},)),
        DemandRecord(kind="actor", key="a2", name="Sampler", bundles=({"CPU": 1.0},)),
    ], now - timedelta(seconds=3))
    mark_ray_current()
    evaluate_resources(now)
    assert firing("demand_infeasible") == []  # within the grace: Ray may still change its mind
    evaluate_resources(now + timedelta(seconds=3))
    [incident] = firing("demand_infeasible")
    assert "actor Learner" in incident.summary and "6 s" in incident.summary
    assert firing("demand_pending") == []  # a feasible demand still waits RAYWATCH_PENDING_S


def test_feasible_demand_names_what_it_waits_behind(settings) -> None:  # type: ignore[no-untyped-def]
    settings.PENDING_S = 120
    node(cpus=2, cpu_used=2.0)
    actor(5000, required_resources={"CPU": 2.0}, repr_name="Trainer")
    now = timezone.now()
    ingest_demands([DemandRecord(kind="placement_group", key="pg1", name="rollout",
                                 bundles=({"CPU": 1.0}, {"CPU": 1.0}), strategy="PACK")],
                   now - timedelta(minutes=3))
    mark_ray_current()
    evaluate_resources(now)
    assert firing("demand_infeasible") == []
    [incident] = firing("demand_pending")
    assert "placement group rollout" in incident.summary
    assert "held by actor Trainer" in incident.summary
    ingest_demands([], now)  # placed: no longer pending
    evaluate_resources(now)
    assert firing("demand_pending") == []


def test_trials_a_search_queues_behind_its_own_running_trials_raise_nothing(settings) -> None:  # type: ignore[no-untyped-def]
    # A Tune search with more trials than room: Tune asks for a placement group per
    # pending trial, and it waits behind the search's running trials (one job). Working
    # as meant; a hang ahead is trial_stalled's. The same group behind an actor no
    # detector watches, or behind another job's trial, is contention: demand_pending,
    # PENDING_S after it began to wait behind them.
    settings.PENDING_S = 120
    node(cpus=2, cpu_used=2.0)
    trial = running_trial(5000, last_result_ago_s=1)
    Trial.objects.filter(pk=trial.pk).update(trainable="train")
    actor(5000, required_resources={"CPU": 1.0}, job_id="02000000", repr_name="train")
    sampler = actor(5001, state="DEAD", required_resources={"CPU": 1.0}, repr_name="Sampler",
                    job_id="02000000")
    now = timezone.now()

    def waits(job_id: str, at: datetime) -> Demand:
        ingest_demands([DemandRecord(kind="placement_group", key="pg1", name="",
                                     bundles=({"CPU": 1.0},), job_id=job_id)], at)
        return Demand.objects.get()

    demand = waits("02000000", now - timedelta(minutes=30))
    mark_ray_current()
    evaluate_resources(now)
    assert demand.queued and demand.explanation.startswith("queued behind its own job's trials")
    assert "trial abc_00000 (grpo)" in demand.explanation
    assert demand.lead == "queued behind its own job's trials:"  # the page lists the names
    assert firing("demand_pending") == []

    Actor.objects.filter(pk=sampler.pk).update(state="ALIVE")  # its job's untracked actor
    # A result line naming the Sampler's pid does not make it a trial's: it does not run
    # the trial's trainable (as the terminate action ties them).
    Trial.objects.create(experiment=trial.experiment, trial_id="abc_00001", trainable="train",
                         status=Trial.RUNNING, node_ip="10.0.0.5", pid=5001)
    demand = waits("02000000", now)
    assert not demand.queued and "actor Sampler" in demand.explanation
    assert demand.lead == "waits for resources held by:"
    assert "abc_00001" not in demand.explanation
    evaluate_resources(now)  # waiting 30 min, but behind others only from now
    assert firing("demand_pending") == []
    later = now + timedelta(seconds=121)
    mark_ray_current(at=later)
    evaluate_resources(later)
    [incident] = firing("demand_pending")
    assert "Sampler" in incident.summary

    Demand.objects.all().delete()
    Actor.objects.filter(pk=sampler.pk).update(state="DEAD")
    demand = waits("03000000", now - timedelta(minutes=30))  # another job's group
    assert not demand.queued
    Incident.objects.all().delete()
    mark_ray_current()
    evaluate_resources(now)
    [incident] = firing("demand_pending")
    assert "held by trial abc_00000 (grpo)" in incident.summary


def test_dead_node_and_spilling_node(settings) -> None:  # type: ignore[no-untyped-def]
    now = timezone.now()
    node("dead-1", state="DEAD", state_message="Unexpected termination: health check failed",
         ended_at=now - timedelta(minutes=1))
    node("spill-1", object_store_spilled_bytes=3 * GIB, spilled_changed_at=now)
    node("old-dead", state="DEAD", state_message="Expected termination",
         ended_at=now - timedelta(days=3))
    # `ray stop` on the head, caught by a poll as its GCS went: the session's end, no node
    # lost. A head that died unexpectedly is still one.
    node("head-1", is_head=True, state="DEAD", state_message="Expected termination: SIGTERM",
         ended_at=now - timedelta(seconds=2))
    node("head-2", is_head=True, state="DEAD",
         state_message="Unexpected termination: health check failed", ended_at=now)
    mark_ray_current()
    evaluate_resources(now)
    dead = {i.subject: i.severity for i in firing("node_dead")}
    assert dead == {"node:dead-1": "critical", "node:head-2": "critical"}
    [spill] = firing("object_store_spilling")
    assert spill.subject == "node:spill-1" and "3.00 GiB" in spill.summary


def test_an_orphan_on_a_runs_gpu_and_a_spill_on_its_node_are_the_runs(fake_gpus, settings) -> None:  # type: ignore[no-untyped-def]
    """Cluster trouble tied to the run it hurts: memory a leftover process holds on a GPU
    a verl run's worker uses (the run's next allocation runs out of memory), and objects
    spilling on the node its actors run on, are that run's incidents (its page, its health,
    its experiment's alert group). An orphan on a GPU no run shares stays the cluster's."""
    from tests.test_rl_run_process import stored_verl_run

    settings.ORPHAN_GRACE_S = 0
    now = timezone.now()
    cluster, run = stored_verl_run(now)  # TaskRunner pid 100, job 01000000, node n1
    Actor.objects.create(cluster=cluster, actor_id="w0", class_name="WorkerDict", pid=200,
                         node_id="n1", job_id="01000000", state="ALIVE", first_seen_at=now,
                         updated_at=now)
    fake_gpus.add_gpu(uuid="GPU-0", processes=[(200, 40 * GIB), (6000, 20 * GIB)])
    fake_gpus.add_gpu(uuid="GPU-1", processes=[(7000, 20 * GIB)])
    Node.objects.filter(cluster=cluster, node_id="n1").update(
        object_store_spilled_bytes=3 * GIB, spilled_changed_at=now)
    mark_ray_current()
    report_gpus()
    evaluate_resources(timezone.now())
    orphans = {i.subject: i for i in firing("gpu_orphan_memory")}
    assert set(orphans) == {"gpu_process:GPU-0/6000", "gpu_process:GPU-1/7000"}
    assert orphans["gpu_process:GPU-0/6000"].trial == run
    assert orphans["gpu_process:GPU-0/6000"].experiment == "verl_demo"
    assert orphans["gpu_process:GPU-1/7000"].trial is None
    [spill] = firing("object_store_spilling")
    assert (spill.subject, spill.trial, spill.experiment) == ("node:n1", run, "verl_demo")
