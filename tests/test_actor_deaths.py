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
