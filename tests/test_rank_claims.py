"""A Ray Train rank's claim, as its own log says it (the trust line): a line cannot make
a process the run's rank 0 (the process raywatch signals for the run, whose reports are
the run's steps). A process keeps the first rank its log said in the run; a rank stays
with its process while Ray lists that process alive, and passes to a restart's new
process once Ray lists the old one gone. A refused claim costs only itself, and shows
as a problem of the run."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from collectors.records import RAYTRAIN, ResultLine, TrialUpdate
from dashboard.cluster.models import Actor, Node
from dashboard.trials.models import RunRank, StepResult, Trial
from dashboard.trials.store import store_updates

pytestmark = [pytest.mark.django_db, pytest.mark.both_backends]
AT = datetime(2026, 12, 7, 18, 0, tzinfo=UTC)


def rank(pid: int, rank_: int, node: str = "gpu-a", step: int | None = None) -> TrialUpdate:
    results = () if step is None or rank_ != 0 else (ResultLine(
        trial_id="sft", attempt=1, iteration=step, at=AT + timedelta(seconds=step),
        time_this_iter_s=None, pid=None, node_ip=None, hostname=None,
        metrics={"loss": 1.0 / step}, byte_offset=0),)
    return TrialUpdate(experiment="job 02000000", experiment_dir=f"{node}:/tmp/ray/s/logs/train",
                       trial_id="sft", trainable="RayTrainWorker", directory=f"/w-{pid}.log",
                       tensorboard=False, console=True, framework=RAYTRAIN, writer_pid=pid,
                       rank=rank_, world_size=2, results=results, rank_step=step,
                       rank_step_at=AT + timedelta(seconds=step) if step else None)


def worker(pid: int, node: str = "gpu-a", state: str = "ALIVE") -> None:
    node_id = node.encode().hex().ljust(56, "0")
    Node.objects.get_or_create(node_id=node_id, defaults={
        "node_ip": f"10.0.0.{len(node)}", "hostname": node, "state": "ALIVE",
        "last_seen_at": timezone.now(), "updated_at": timezone.now()})
    Actor.objects.update_or_create(actor_id=f"{pid:032x}", defaults={
        "state": state, "pid": pid, "node_id": node_id, "class_name": "RayTrainWorker",
        "job_id": "02000000", "first_seen_at": timezone.now(), "updated_at": timezone.now()})


def ranks() -> dict[int, int]:
    return dict(RunRank.objects.values_list("rank", "pid"))


def test_a_line_claiming_rank_0_does_not_make_its_process_the_runs() -> None:
    worker(100)
    worker(200)
    store_updates([rank(100, 0, step=1), rank(200, 1, step=1)], timezone.now())
    run = Trial.objects.get(trial_id="sft")
    assert (run.writer_pid, ranks()) == (100, {0: 100, 1: 200})
    # Rank 1's process logs a line saying it is rank 0, with a report of its own.
    store_updates([rank(200, 0, step=99), rank(100, 0, step=2)], timezone.now())
    run.refresh_from_db()
    assert run.writer_pid == 100 and ranks() == {0: 100, 1: 200}
    assert sorted(StepResult.objects.values_list("iteration", flat=True)) == [1, 2]
    assert run.parse_errors == 1
    assert "pid 200 said it is rank 0, but it is rank 1 of this run" in run.last_parse_error


def test_a_rank_held_by_a_live_process_is_not_taken_by_another() -> None:
    worker(100)
    worker(300, node="gpu-b")  # a process of the job on another node, no rank yet
    store_updates([rank(100, 0, step=1)], timezone.now())
    store_updates([rank(300, 0, node="gpu-b", step=50)], timezone.now())
    run = Trial.objects.get(trial_id="sft")
    assert run.writer_pid == 100 and ranks() == {0: 100}
    assert "held by pid 100, which Ray lists alive: refused" in run.last_parse_error
    assert run.iteration == 1


def test_a_restart_takes_its_ranks_once_the_old_processes_are_gone() -> None:
    worker(100)
    worker(200)
    store_updates([rank(100, 0, step=3), rank(200, 1, step=3)], timezone.now())
    # The worker group failed; Ray Train starts a new one on the same ranks.
    worker(100, state="DEAD")
    worker(200, state="DEAD")
    worker(110)
    worker(210)
    store_updates([replace(rank(110, 0, step=1), directory="/w-110.log"),
                   rank(210, 1, step=1)], timezone.now())
    run = Trial.objects.get(trial_id="sft")
    assert run.writer_pid == 110 and ranks() == {0: 110, 1: 210}
    assert run.parse_errors == 0
