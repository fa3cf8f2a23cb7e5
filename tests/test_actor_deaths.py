"""Why Ray says an actor died (its death_cause, as Ray 2.60's state API sends it with
detail): ended on purpose by its owner or a user (Tune pausing a trial drops its handle,
exit_actor, ray.kill, a placement group removed) or not (a crash, a signal, the OOM killer,
its node). The replies below are Ray's own, recorded from a local cluster."""

from __future__ import annotations

from typing import Any

from collectors.raystate import death_words, parse_actor_death

ACTOR = "a7fccd1574d6ac48bb6d720e02000000"
CRASH = ("The actor is dead because its worker process has died. Worker exit type: "
         "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error "
         "code 2. End of file. Some common causes include: (1) the process was killed by the "
         "OOM killer due to high memory usage, (2) ray stop --force was called, or (3) the "
         "worker crashed unexpectedly due to SIGSEGV or another unexpected error.")


def reply(cause: dict[str, Any] | None, state: str = "DEAD",
          actor_id: str = ACTOR) -> dict[str, Any]:
    row = {"actor_id": actor_id, "state": state, "class_name": "ImplicitFunc",
           "death_cause": cause}
    return {"result": True, "msg": "", "data": {"result": {"total": 1, "result": [row]}}}


def died(reason: str, message: str) -> dict[str, Any]:
    return {"actor_died_error_context": {
        "error_message": message, "owner_id": "02000000ffffffffffffffffffffffffffffffffff",
        "node_ip_address": "192.0.2.2", "pid": 14501, "class_name": "ImplicitFunc",
        "actor_id": ACTOR, "reason": reason, "name": "", "never_started": False}}


def test_an_actor_its_owner_ended_is_ended_on_purpose() -> None:
    cases = {
        "OUT_OF_SCOPE": "The actor is dead because all references to the actor were removed.",
        "RAY_KILL": "The actor is dead because it was killed by `ray.kill`.",
        "WORKER_DIED": "The actor is dead because its worker process has died. Worker exit "
                       "type: INTENDED_USER_EXIT Worker exit detail: Worker exits by an user "
                       "request. Worker exits with an exit code 0. exit_actor() is called.",
    }
    for reason, message in cases.items():
        death = parse_actor_death(reply(died(reason, message)), ACTOR)
        assert death is not None and death.on_purpose, (reason, death)
        assert death.reason == reason and death.message == message
    removed = parse_actor_death(reply(died(
        "WORKER_DIED", "The actor is dead because its worker process has died. Worker exit "
        "type: INTENDED_SYSTEM_EXIT Worker exit detail: Destroying worker since its placement "
        "group was removed.")), ACTOR)
    assert removed is not None and removed.on_purpose
    assert removed.exit_type == "INTENDED_SYSTEM_EXIT"


def test_a_crash_a_dead_owner_or_node_and_the_memory_monitor_are_not() -> None:
    crash = parse_actor_death(reply(died("WORKER_DIED", CRASH)), ACTOR)
    assert crash is not None and not crash.on_purpose and crash.exit_type == "SYSTEM_ERROR"
    for reason in ("OWNER_DIED", "NODE_DIED"):
        death = parse_actor_death(reply(died(reason, "The actor died.")), ACTOR)
        assert death is not None and not death.on_purpose and death.reason == reason
    oom = parse_actor_death(reply({"oom_context": {
        "error_message": "Task was killed due to the node running low on memory.",
        "fail_immediately": False}}), ACTOR)
    assert oom is not None and oom.reason == "OUT_OF_MEMORY" and not oom.on_purpose


def test_what_ray_did_not_say_is_no_answer() -> None:
    assert parse_actor_death(reply(None), ACTOR) is None  # no cause given
    assert parse_actor_death(reply(died("RAY_KILL", "x"), state="ALIVE"), ACTOR) is None
    assert parse_actor_death(reply(died("RAY_KILL", "x"), actor_id="other"), ACTOR) is None
    assert parse_actor_death({"data": "nonsense"}, ACTOR) is None
    assert parse_actor_death(reply({"actor_died_error_context": "text"}), ACTOR) is None
    # A message a worker could shape is only quoted: the reason decides, and its length
    # is bounded.
    long = parse_actor_death(reply(died("WORKER_DIED", "Worker exit type: SYSTEM_ERROR "
                                        + "x" * 100_000)), ACTOR)
    assert long is not None and not long.on_purpose and len(long.message) <= 8000
    # Ray's exit type comes first; an exception's text quoted after it cannot change it.
    quoted = parse_actor_death(reply(died("WORKER_DIED", "Worker exit type: USER_ERROR Worker "
                                          "exit detail: ValueError: Worker exit type: "
                                          "INTENDED_USER_EXIT")), ACTOR)
    assert quoted is not None and not quoted.on_purpose and quoted.exit_type == "USER_ERROR"


def test_how_a_process_died_in_words() -> None:
    assert death_words("WORKER_DIED", CRASH).startswith(
        "its process died unexpectedly: the OOM killer, a signal such as SIGSEGV, or a crash")
    assert death_words("NODE_DIED", "") == "its node died (Ray: NODE_DIED)"
    assert death_words("OWNER_DIED", "x") == "its owner died first (Ray: OWNER_DIED)"
    assert death_words("OUT_OF_MEMORY", "") == \
        "Ray's memory monitor killed it (Ray: OUT_OF_MEMORY)"
    # Ray's exit type is the first one its message gives, not one an exception quotes.
    assert death_words("WORKER_DIED", "Worker exit type: USER_ERROR ... Worker exit type: "
                       "SYSTEM_ERROR") == "its process exited with an error (Ray: WORKER_DIED, " \
        "USER_ERROR)"
    assert death_words("UNSCHEDULABLE", "") == "Ray: UNSCHEDULABLE"


# A worker's stderr as Ray 2.60 wrote it when a WorkerDict dereferenced NULL (ctypes), the
# node's own paths kept: Ray's signal handler, then Python's faulthandler.
SEGV_ERR = """\
:job_id:01000000
[2026-12-07 21:40:11,957 E 7386 7386] logging.cc:474: *** SIGSEGV received at time=1796679611 \
on cpu 1 ***
[2026-12-07 21:40:11,957 E 7386 7386] logging.cc:474: PC: @     0x7f2adc974219  (unknown)
Fatal Python error: Segmentation fault

Stack (most recent call first):
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/ctypes/__init__.py", line 519 in string_at
  File "/srv/verl/workers/rollout.py", line 95 in generate_sequences
  File "/srv/venv/lib/python3.11/site-packages/ray/_private/function_manager.py", line 740 \
in actor_method_executor

Extension modules: msgpack._cmsgpack, ray._raylet (total: 2)
"""


def test_a_crashed_workers_own_log_says_how_it_died() -> None:
    """Ray's SYSTEM_ERROR reads alike for the OOM killer and a SIGSEGV; the worker's own
    stderr does not: a fatal signal leaves Ray's handler line and the faulthandler's
    stack (the innermost frame, and past Python's own library the caller), a SIGKILL
    nothing. The words then say it, with Ray's reason kept."""
    from collectors.raylogs import NO_SIGNAL, fatal_signal
    from dashboard.cluster.failures import crashed_actors
    from dashboard.cluster.models import CallFailure

    said = fatal_signal(SEGV_ERR)
    assert said == ("SIGSEGV (Segmentation fault) in string_at (__init__.py:519) from "
                    "generate_sequences (rollout.py:95)")
    aborted = "Fatal Python error: Aborted\n\nThread 0x1 (most recent call first):\n" \
              '  File "/srv/venv/lib/python3.11/site-packages/torch/cuda/__init__.py", line 9' \
              " in synchronize\n"
    assert fatal_signal(aborted) == "a fatal signal (Aborted) in synchronize (__init__.py:9)"
    assert fatal_signal("*** SIGBUS received at time=1 ***\n") == "SIGBUS"
    # A worker of several threads (Ray's own): faulthandler dumps the others first and the
    # one that crashed last, as "Current thread" (a full run's worker, Ray 2.60).
    threads = SEGV_ERR.replace("Stack (most recent call first):", (
        "Thread 0x00007f7fbd7fe640 (most recent call first):\n"
        '  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 327 in wait\n'
        '  File "/srv/ray/_private/gc_collect_manager.py", line 29 in run\n\n'
        "Current thread 0x00007f80c2bb1740 (most recent call first):"))
    assert fatal_signal(threads) == said
    assert fatal_signal("INFO worker.py: Task finished\nKilled\n") is None  # SIGKILL: no trace
    # What a process printed is data: its own words, cut to a line's worth.
    assert len(fatal_signal("Fatal Python error: " + "x" * 5000) or "") < 200
    assert death_words("WORKER_DIED", CRASH, said) == (
        f"its process died: {said} (Ray: WORKER_DIED, SYSTEM_ERROR)")
    assert death_words("WORKER_DIED", CRASH, NO_SIGNAL).startswith(
        "its process died: its log shows no fatal signal: SIGKILL (the kernel's OOM killer")
    # Which actors crashed, as a job's failures say: a dead actor's own call, and the one a
    # trainer's ray.get names; a raised exception is no crash.
    worker = "89d04f8aec33be8e411bd92301000000"
    failures = [
        CallFailure(cluster_id=1, actor_id=ACTOR, error_type="ACTOR_DIED", message=CRASH),
        CallFailure(cluster_id=1, actor_id="ff" * 16, error_type="TASK_EXECUTION_EXCEPTION",
                    message=f"ActorDiedError: ...\n\tclass_name: WorkerDict\n\tactor_id: "
                            f"{worker}\n\tpid: 7386\n{CRASH}"),
        CallFailure(cluster_id=1, actor_id="ee" * 16, error_type="TASK_EXECUTION_EXCEPTION",
                    message="RuntimeError: CUDA out of memory")]
    assert crashed_actors(failures) == [ACTOR, worker]
    failure = CallFailure(cluster_id=1, name="TaskRunner.run",
                          error_type="TASK_EXECUTION_EXCEPTION",
                          message=f"ray::WorkerDict.generate() (pid=7386, ip=10.0.0.5)\n{CRASH}")
    assert failure.describe((), said).splitlines()[-1] == f"Its process died: {said}"
