"""Why an RL run ended, as Ray lists its job's failed calls (collectors.raystate
parse_failed_calls, pure): the first to fail first, other jobs' and states' rows and rows
that are not objects left out, a long traceback kept by its end (where the exception is
named), and a hostile row costing only itself."""

from __future__ import annotations

import pytest

from collectors.raystate import FAILURE_MESSAGE_CHARS, parse_failed_calls


def reply(rows: list[object]) -> dict:
    return {"result": True, "data": {"result": {"result": rows}}}


def row(task_id: str, name: str, end_ms: object, **extra: object) -> dict:
    return {"task_id": task_id, "attempt_number": 0, "name": name, "state": "FAILED",
            "type": "ACTOR_TASK", "job_id": "03000000", "actor_id": "ab" * 16,
            "node_id": "cd" * 28, "worker_pid": 4242, "error_type": "TASK_EXECUTION_EXCEPTION",
            "error_message": f"{name} raised", "end_time_ms": end_ms, **extra}


def test_the_first_failure_comes_first_and_only_the_jobs_failures_count() -> None:
    long = "Traceback (most recent call last):\n" + "  frame\n" * 5000 + "RuntimeError: OOM"
    records = parse_failed_calls(reply([
        row("t-trainer", "TaskRunner.run", 1_795_000_002_000),
        row("t-worker", "WorkerDict.actor_rollout_generate_sequences", 1_795_000_001_000,
            error_message=long),
        row("t-other", "Other.run", 1_795_000_000_000, job_id="04000000"),
        row("t-running", "Running.run", 1_795_000_000_000, state="RUNNING"),
        row("t-no-end", "Late.run", None),
        "not an object", {"state": "FAILED"},  # hostile rows: only themselves lost
        row("t-odd", "Odd.run", "yesterday", worker_pid="x", attempt_number=None),
    ]), "03000000")
    assert [r.name for r in records][:2] == ["WorkerDict.actor_rollout_generate_sequences",
                                             "TaskRunner.run"]
    assert {r.name for r in records[2:]} == {"Late.run", "Odd.run"}  # no end time: last
    first = records[0]
    assert first.message.endswith("RuntimeError: OOM")
    assert len(first.message) == FAILURE_MESSAGE_CHARS
    assert (first.pid, first.error_type, first.job_id) == (4242, "TASK_EXECUTION_EXCEPTION",
                                                           "03000000")
    odd = next(r for r in records if r.name == "Odd.run")
    assert odd.pid is None and odd.failed_at is None and odd.attempt == 0
    assert parse_failed_calls({"result": True}, "03000000") == []


def test_a_failure_raised_again_by_a_ray_get_names_the_call_it_began_in() -> None:
    """Ray's message for a trainer's call that raised what its ray.get got names the call
    the failure began in (its own header, `:Class.method() (pid=…)`): the run's error
    says that call, when the worker's own failure was never listed (it died with its
    owner before Ray heard of it)."""
    from dashboard.cluster.models import CallFailure

    cascade = CallFailure(cluster_id=1, name="TaskRunner.run",
                          error_type="TASK_EXECUTION_EXCEPTION", message=(
        # As Ray 2.60 wrote it (tests/test_console_runs.py's crashed run, seen there)
        "User exception:\n"
        "::WorkerDict.actor_rollout_generate_sequences() (pid=20157, ip=10.0.0.5, "
        "actor_id=a07a, repr=<default_worker.WorkerDict object at 0x7fea34922090>)\n"
        "  File \"fsdp_workers.py\", line 61, in generate_sequences\n"
        "RuntimeError: CUDA out of memory"))
    assert cascade.first_call() == "WorkerDict.actor_rollout_generate_sequences"
    assert cascade.describe().startswith(
        "WorkerDict.actor_rollout_generate_sequences failed (TASK_EXECUTION_EXCEPTION, raised "
        "again by TaskRunner.run):\n")
    own = CallFailure(cluster_id=1, name="Runner.run", error_type="OUT_OF_MEMORY",
                      message="Task was killed")
    assert own.describe() == "Runner.run failed (OUT_OF_MEMORY):\nTask was killed"


def test_what_ray_left_of_the_header_still_names_the_call() -> None:
    """Ray keeps a long message's tail, cut anywhere (seen on Ray 2.60: "User exception:\n"
    then whatever is left, from "ror(RuntimeError): ray::…" to "kerDict.generate() (pid=…"
    when a CI machine's longer paths moved the cut): the call is still named, completed
    from the job's calls and actors when the cut ate into its class."""
    from dashboard.cluster.models import CallFailure

    for left in ("ror(RuntimeError): ray::", "ray::", "::", ":", "y::"):
        failure = CallFailure(cluster_id=1, name="TaskRunner.run", message=(
            f"User exception:\n{left}WorkerDict.generate() (pid=2, ip=10.0.0.5)\n"
            "RuntimeError: CUDA out of memory"))
        assert failure.first_call() == "WorkerDict.generate", left
    cut = CallFailure(cluster_id=1, name="TaskRunner.run", message=(
        "User exception:\nkerDict.generate() (pid=2, ip=10.0.0.5)\nRuntimeError: OOM"))
    job = {"TaskRunner", "WorkerDict", "TaskRunner.run"}
    assert cut.first_call(job) == "WorkerDict.generate"
    assert cut.first_call(job | {"WorkerDict.generate"}) == "WorkerDict.generate"
    # Two classes the remnant could be: what is left is said, not a guess.
    assert cut.first_call(job | {"MakerDict"}) == "kerDict.generate"
    assert cut.first_call() == "kerDict.generate"
    # A call that raised its own exception, its header's start eaten into its name (a
    # full run, Ray 2.60: `ray::TaskRunner.run()` left as `askRunner.run()`).
    own = CallFailure(cluster_id=1, name="TaskRunner.run", error_type="TASK_EXECUTION_EXCEPTION",
                      message="User exception:\naskRunner.run() (pid=18808, ip=192.0.2.2)\n"
                              "RuntimeError: CUDA out of memory")
    assert own.first_call() == "TaskRunner.run"
    assert own.describe().startswith("TaskRunner.run failed (TASK_EXECUTION_EXCEPTION):\n")


def test_a_call_ended_by_its_drivers_end_is_no_failure_of_the_run() -> None:
    """Ray's words (2.60) for calls a driver's Ctrl-C ended: their owner died (the driver,
    its id the job's then f's; or the trainer actor the driver's end took along, owner of
    its worker group's calls), or their worker was made to exit as the job finished.
    A cascade, never the cause; a call that raised is."""
    from dashboard.cluster.failures import driver_ended
    from dashboard.cluster.models import CallFailure

    def failure(message: str) -> CallFailure:
        return CallFailure(cluster_id=1, job_id="03000000", name="TaskRunner.run",
                           error_type="WORKER_DIED", message=message)

    owner = "Worker running the task (66304ada) died because its owner has died. Owner Id: "
    assert driver_ended(failure(owner + "03000000" + "f" * 48 + " Owner Ip address: 1.2"))
    assert driver_ended(failure("Worker (9b1049) died with exit_type: 3 with error_message: "
                                "Worker force exited because its job has finished"))
    assert driver_ended(failure(owner + "4aaa5d8437e08a0fd2ada6ba4c9ef4f1354e8324c4844e3b152e7b6a"
                                " Owner Ip address: 10.0.0.5"))  # the trainer's worker
    assert not driver_ended(failure("RuntimeError: CUDA out of memory"))
    assert not driver_ended(failure("The actor is dead because its worker process has died. "
                                    "Worker exit type: SYSTEM_ERROR"))


@pytest.mark.django_db
@pytest.mark.both_backends
def test_a_failures_text_cannot_point_at_another_jobs_actor() -> None:
    """A job's exception text is its own words: a message naming another job's actor
    ("actor_id: …") beside Ray's crash words reads no log of that actor and marks nothing
    on it; the job's own crashed actor is still looked at."""
    from django.utils import timezone

    from collectors.raystate import RayEndpoint
    from dashboard.cluster.failures import SYSTEM_ERROR, note_job_crash
    from dashboard.cluster.models import Actor, CallFailure, settings_cluster_pk
    from tests.runner import free_port

    now = timezone.now()
    cluster = settings_cluster_pk()
    for actor_id, job in (("aa" * 16, "05000000"), ("bb" * 16, "06000000")):
        Actor.objects.create(cluster_id=cluster, actor_id=actor_id, class_name="WorkerDict",
                             job_id=job, state="DEAD", pid=7, first_seen_at=now,
                             updated_at=now, ended_at=now)
    CallFailure.objects.create(
        cluster_id=cluster, job_id="05000000", task_id="t1", name="TaskRunner.run",
        error_type="TASK_EXECUTION_EXCEPTION", failed_at=now, seen_at=now,
        message=f"RuntimeError: see\\n\\tactor_id: {'bb' * 16}\\n{SYSTEM_ERROR}")
    nothing_there = RayEndpoint(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    note_job_crash(nothing_there, cluster, "05000000")
    assert Actor.objects.get(actor_id="bb" * 16).crash == ""  # the other job's: untouched
    # The job's own dead worker was asked about (Ray did not answer here): no crash said.
    assert Actor.objects.get(actor_id="aa" * 16).crash == ""
    CallFailure.objects.filter(task_id="t1").update(
        message=f"ActorDiedError\\n\\tactor_id: {'aa' * 16}\\n{SYSTEM_ERROR}")
    note_job_crash(nothing_there, cluster, "05000000")
    assert Actor.objects.get(actor_id="aa" * 16).crash.startswith("its log was not read")
