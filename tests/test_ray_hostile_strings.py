"""Ray's strings are data of any size (issue 43, M3): a job submitted with a 200-character
submission id, an actor whose name and repr hold NUL, resources keyed with NUL, a call of
a 100-character id whose name holds NUL. Ray stores such strings unchecked; raywatch keeps
each within its column (NUL taken out, a string cut to its column), so the poll that
stores them succeeds on Postgres as on SQLite, and every other row of it is stored too.
Before, one such row failed the poll's whole transaction on Postgres, at every poll:
nodes, actors, jobs and calls all went stale."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from collectors.records import ActorRecord, CallRecord, JobRecord
from dashboard.cluster.calls import ingest_calls
from dashboard.cluster.models import Actor, Cluster, Job, RayCall, settings_cluster_pk
from dashboard.cluster.workload import ingest_actors, ingest_jobs

pytestmark = [pytest.mark.django_db, pytest.mark.both_backends]


def job(key: str, entrypoint: str = "python train.py") -> JobRecord:
    return JobRecord(job_id=None, submission_id=key, type="SUBMISSION", status="RUNNING",
                     entrypoint=entrypoint, message="", driver_pid=None, driver_node_id=None,
                     driver_node_ip=None, start_time=None, end_time=None)


def actor(actor_id: str, name: str = "", repr_name: str = "",
          resources: dict | None = None) -> ActorRecord:
    return ActorRecord(actor_id=actor_id, state="ALIVE", pid=4242, node_id="cd" * 28,
                       class_name="WorkerDict", repr_name=repr_name, name=name,
                       job_id="02000000", placement_group_id=None,
                       required_resources=resources or {"CPU": 1.0})


def call(task_id: str, name: str) -> CallRecord:
    return CallRecord(task_id=task_id, attempt=0, name=name, kind="ACTOR_TASK",
                      job_id="02000000", actor_id="ab" * 16, node_id="cd" * 28, pid=4242)


def test_a_jobs_long_id_and_nul_in_an_actor_or_call_cost_nothing_else() -> None:
    cluster = Cluster.objects.get(pk=settings_cluster_pk())
    now = timezone.now()
    long_id = "raysubmit_" + "x" * 190
    ingest_jobs([job(long_id, "python train.py \x00--evil"), job("raysubmit_ok")], now, cluster)
    stored = {j.key: j for j in Job.objects.filter(cluster=cluster)}
    assert set(stored) == {long_id[:128], "raysubmit_ok"}
    assert stored[long_id[:128]].entrypoint == "python train.py --evil"
    # The next poll lists the same jobs: matched to their rows, not created again.
    ingest_jobs([job(long_id), job("raysubmit_ok")], now + timedelta(seconds=2), cluster)
    assert Job.objects.filter(cluster=cluster).count() == 2
    ingest_actors([actor("a" * 32, name="evil\x00name", repr_name="<W \x00>",
                         resources={"GPU\x00": 1.0, "CPU": 1.0}),
                   actor("b" * 32, name="fine")], now, cluster)
    actors = {a.actor_id: a for a in Actor.objects.filter(cluster=cluster)}
    assert (actors["a" * 32].name, actors["a" * 32].repr_name) == ("evilname", "<W >")
    assert actors["a" * 32].required_resources == {"GPU": 1.0, "CPU": 1.0}
    assert actors["b" * 32].name == "fine"
    ingest_calls([call("t" * 100, "Worker\x00.generate"), call("ok", "WorkerDict.ping")],
                 now, cluster)
    began = RayCall.objects.get(task_id="t" * 64).first_seen_at
    ingest_calls([call("t" * 100, "Worker\x00.generate"), call("ok", "WorkerDict.ping")],
                 now + timedelta(seconds=2), cluster)  # still running: the same rows
    assert RayCall.objects.get(task_id="t" * 64).first_seen_at == began  # not begun again
    assert dict(RayCall.objects.filter(cluster=cluster).values_list("task_id", "name")) == {
        "t" * 64: "Worker.generate", "ok": "WorkerDict.ping"}
