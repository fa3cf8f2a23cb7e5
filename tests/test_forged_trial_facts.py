"""A result line is the job author's text: its `pid`, `hostname` and `node_ip` never
choose what raywatch signals or samples. A trial is acted on only through the process Ray
ties it to (a live actor of its trainable with that pid, on a live node of its cluster);
otherwise the terminate and the stack are refused with the reason, audited, and nothing
is signalled. Runs on both backends (test_on_embedded_default.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.utils import timezone

from collectors.hostinfo import host_name
from dashboard.actions.models import AuditEntry
from dashboard.cluster.models import Actor, Cluster
from dashboard.trials.models import TrialStack
from tests.agents import node_agent
from tests.conftest import LiveServer, token_client, wait_for
from tests.test_terminate_on_this_host import hung_trial

# On SQLite too: a result line never picks what is signalled
pytestmark = [pytest.mark.both_backends, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen]:
    """A process of this host that no trial runs (raywatch's database, sshd, ...)."""
    process = subprocess.Popen(["sleep", "600"])
    yield process
    process.kill()
    process.wait()


def terminate(user, trial, **expected):  # type: ignore[no-untyped-def]
    return token_client(user).post(f"/api/trials/{trial.pk}/terminate",
                                   {"reason": "looks stalled", "expected": expected},
                                   format="json")


def test_a_line_naming_this_host_and_any_pid_signals_nothing(  # type: ignore[no-untyped-def]
        settings, operator, bystander) -> None:
    settings.EMBEDDED = True
    trial = hung_trial(bystander.pid, ray=False)  # the line says: this host, that pid
    preview = token_client(operator).get(f"/api/trials/{trial.pk}/terminate")
    assert preview.status_code == 409
    assert "Ray lists no live train actor with pid" in preview.json()["detail"]
    reply = terminate(operator, trial, pid=bystander.pid)
    assert reply.status_code == 409 and reply.json()["detail"] == preview.json()["detail"]
    [entry] = AuditEntry.objects.actions()
    assert entry.state == AuditEntry.REFUSED and entry.outcome == reply.json()["detail"]
    assert bystander.poll() is None  # never signalled


def test_a_ray_actor_of_another_trainable_is_not_the_trial(  # type: ignore[no-untyped-def]
        settings, operator, hung_process) -> None:
    settings.EMBEDDED = True
    trial = hung_trial(hung_process.pid)
    Actor.objects.filter(pid=hung_process.pid).update(repr_name="Learner")  # not a trial
    reply = terminate(operator, trial, pid=hung_process.pid)
    assert reply.status_code == 409 and "no live train actor" in reply.json()["detail"]
    assert hung_process.poll() is None


def test_a_pid_reused_by_another_program_on_this_host_is_left_alone(  # type: ignore[no-untyped-def]
        settings, live_server_asgi: LiveServer, tmp_path: Path, operator, bystander) -> None:
    settings.EMBEDDED = True
    trial = hung_trial(bystander.pid)  # Ray still lists the actor; the pid is a plain sleep
    # This host's agent, the one that would signal it, watches Ray workers: not a sleep.
    with node_agent(live_server_asgi.url, tmp_path):
        reply = terminate(operator, trial, pid=bystander.pid)
    assert reply.status_code == 409
    assert (f"the agent of {host_name()} does not list pid {bystander.pid}: it ended, or is "
            "not a process the agent watches") in reply.json()["detail"]
    assert bystander.poll() is None


def test_a_second_trial_naming_the_same_process_is_refused(  # type: ignore[no-untyped-def]
        settings, operator, hung_process) -> None:
    settings.EMBEDDED = True
    real = hung_trial(hung_process.pid)
    forged = hung_trial(hung_process.pid, trial_id="f_00000", experiment="other", ray=False)
    for trial in (forged, real):
        reply = terminate(operator, trial, pid=hung_process.pid)
        assert reply.status_code == 409, reply.content
        assert "also names pid" in reply.json()["detail"]
    assert hung_process.poll() is None


def test_a_trial_id_of_another_cluster_cannot_shadow_the_one_acted_on(  # type: ignore[no-untyped-def]
        settings, operator, hung_process) -> None:
    """Actions name the row: a newer trial of the same id on another cluster (any node
    token can write one) is not the one the operator confirmed."""
    settings.EMBEDDED = True
    real = hung_trial(hung_process.pid)
    other = Cluster.objects.create(name="elsewhere", first_seen_at=timezone.now(),
                                   state_since=timezone.now())
    shadow = hung_trial(4242, ray=False, experiment="search-b")
    shadow.experiment.cluster = other
    shadow.experiment.save()
    shadow.trial_id = real.trial_id
    shadow.save()
    preview = token_client(operator).get(f"/api/trials/{real.pk}/terminate").json()
    assert preview["target"]["trial_pk"] == real.pk
    assert preview["target"]["cluster"] == real.experiment.cluster.name
    assert preview["target"]["pid"] == hung_process.pid
    assert preview["target"]["actor_id"] == f"actor-{hung_process.pid}-127.0.0.1"


def test_a_stack_of_a_process_ray_does_not_tie_to_the_trial_is_not_taken(  # type: ignore[no-untyped-def]
        settings, operator, bystander) -> None:
    settings.EMBEDDED = True  # the stack is taken in this process's background pool
    trial = hung_trial(bystander.pid, ray=False)
    reply = token_client(operator).post(f"/api/trials/{trial.pk}/stack")
    assert reply.status_code == 202
    stack = wait_for(lambda: TrialStack.objects.exclude(state=TrialStack.PENDING).first(),
                     30, 0.2, "the stack's outcome")
    assert stack.state == TrialStack.FAILED and not stack.text
    assert "Ray lists no live train actor" in stack.reason


def test_crossed_forged_lines_swap_no_pids(settings) -> None:  # type: ignore[no-untyped-def]
    """Issue 43, M1: a job writes lines under two victims' experiment and trial ids (from
    another directory, as another copy of their logs), each naming the other's pid, at
    attempt 50 and the largest iteration. Neither trial moves while its own process lives
    (terminating one would have stopped the other); a real restart moves its trial once
    Ray lists the old process gone, and never onto a process another running trial names."""
    from datetime import timedelta

    from collectors.records import ResultLine, TrialUpdate
    from dashboard.cluster.models import Node, settings_cluster_pk
    from dashboard.trials.models import Trial
    from dashboard.trials.store import store_updates

    now = timezone.now()
    cluster = Cluster.objects.get(pk=settings_cluster_pk())
    Node.objects.create(cluster=cluster, node_id="n5", node_ip="10.0.0.5", hostname="gpu-5",
                        state="ALIVE", last_seen_at=now)

    def line(trial_id: str, pid: int, attempt: int = 1, iteration: int = 1) -> TrialUpdate:
        result = ResultLine(trial_id=trial_id, attempt=attempt, iteration=iteration, at=now,
                            time_this_iter_s=1.0, pid=pid, node_ip="10.0.0.5",
                            hostname="gpu-5", metrics={"loss": 1.0}, byte_offset=0)
        return TrialUpdate(experiment=f"exp-{trial_id}", experiment_dir=f"/r/exp-{trial_id}",
                           trial_id=trial_id, trainable="train_fn",
                           directory=f"/r/exp-{trial_id}/{trial_id}", tensorboard=False,
                           results=(result,))

    for pid in (100, 200):
        Actor.objects.create(cluster=cluster, actor_id=f"a{pid}", pid=pid, node_id="n5",
                             state="ALIVE", repr_name="train_fn", first_seen_at=now,
                             updated_at=now)
    store_updates([line("a", 100), line("b", 200)], now)
    Trial.objects.update(status=Trial.RUNNING)
    forged = [replace_dir(line("a", 200, 50, 2**31 - 1)), replace_dir(line("b", 100, 50,
                                                                           2**31 - 1))]
    store_updates(forged, now + timedelta(seconds=1))
    assert dict(Trial.objects.values_list("trial_id", "pid")) == {"a": 100, "b": 200}
    # Trial a restarts: Ray lists its old process gone, its new line names pid 300.
    Actor.objects.filter(pid=100).update(state="DEAD")
    store_updates([line("a", 300, 51, 1)], now + timedelta(seconds=2))
    assert Trial.objects.get(trial_id="a").pid == 300
    # Onto another running trial's process: never.
    Actor.objects.filter(pid=300).delete()
    store_updates([line("a", 200, 52, 1)], now + timedelta(seconds=3))
    assert Trial.objects.get(trial_id="a").pid == 300


def replace_dir(update):  # type: ignore[no-untyped-def]
    """The same trial ids, read from another directory (the forger's copy)."""
    from dataclasses import replace

    return replace(update, experiment_dir="/r/elsewhere", directory="/r/elsewhere/x")
