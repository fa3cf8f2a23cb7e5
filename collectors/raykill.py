"""Ending things in Ray from outside the driver (docs/ray-facts.md, "Ending a hung
trial, a job, a process"): Ray 2.60 has no public call to kill an unnamed actor, so this
uses the GCS's KillActorViaGcs RPC (internal API: ray is pinned with == for it, and
tests/test_terminate_trial.py checks it on a real cluster), and the Jobs API to stop
a job. Django-free, like every collector.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from collectors.http import SourceError, post_json
from collectors.raygrpc import call
from collectors.raystate import RayEndpoint

ACTOR_STATES = {0: "DEPENDENCIES_UNREADY", 1: "PENDING_CREATION", 2: "ALIVE", 3: "RESTARTING",
                4: "DEAD"}


ACTOR_ID_BYTES = 16  # Ray's ActorID: 12 unique bytes and the 4 of its job's id


def _id_bytes(actor_id: str) -> bytes:
    """The id as the GCS takes it; an id Ray could not have given is refused here."""
    try:
        raw = bytes.fromhex(actor_id)
    except ValueError:
        raw = b""
    if len(raw) != ACTOR_ID_BYTES:
        raise SourceError(f"not an actor id: {actor_id[:80]!r}")
    return raw


def kill_actor(gcs_address: str, token: str | None, actor_id: str, force: bool,
               timeout_s: float = 5.0) -> None:
    """Ask the GCS to kill the actor: force=False lets its running task finish first
    (useless for a hung trial), force=True kills its worker process now."""
    from ray.core.generated import gcs_service_pb2 as pb2
    from ray.core.generated.gcs_service_pb2_grpc import ActorInfoGcsServiceStub

    request = pb2.KillActorViaGcsRequest(actor_id=_id_bytes(actor_id), force_kill=force,
                                         no_restart=True)
    reply = call(gcs_address, ActorInfoGcsServiceStub, "KillActorViaGcs", request, token,
                 timeout_s, f"the Ray GCS at {gcs_address} refused the kill")
    if reply.status.code != 0:
        raise SourceError(f"the Ray GCS could not kill actor {actor_id}: {reply.status.message}")


def actor_state(gcs_address: str, token: str | None, actor_id: str,
                timeout_s: float = 5.0) -> str:
    """DEAD, ALIVE, … as the GCS sees the actor now."""
    from ray.core.generated import gcs_service_pb2 as pb2
    from ray.core.generated.gcs_service_pb2_grpc import ActorInfoGcsServiceStub

    reply = call(gcs_address, ActorInfoGcsServiceStub, "GetActorInfo",
                 pb2.GetActorInfoRequest(actor_id=_id_bytes(actor_id)), token, timeout_s,
                 f"cannot reach the Ray GCS at {gcs_address}")
    return ACTOR_STATES.get(reply.actor_table_data.state, "UNKNOWN")


@dataclass(frozen=True)
class GcsActor:
    """One actor, and the GCS (and its token) that answers for it: resolved once, where an
    action starts, then asked and told as often as the action needs."""

    gcs_address: str
    token: str | None
    actor_id: str

    def state(self) -> str:
        return actor_state(self.gcs_address, self.token, self.actor_id)

    def kill(self, force: bool) -> None:
        kill_actor(self.gcs_address, self.token, self.actor_id, force)


def job_url(endpoint: RayEndpoint, submission_id: str, action: str = "") -> str:
    """A job's URL in Ray's Jobs API, its id quoted whole (an id is any text its submitter
    chose: a `/` or `?` in it must not turn the URL into another)."""
    return (f"{endpoint.dashboard_url}/api/jobs/{quote(submission_id, safe='')}"
            + (f"/{action}" if action else ""))


def stop_job(endpoint: RayEndpoint, submission_id: str) -> bool:
    """POST /api/jobs/{id}/stop: True when Ray stopped it, False when it had ended."""
    reply = post_json(job_url(endpoint, submission_id, "stop"), {},
                      headers=endpoint.headers(), timeout=endpoint.timeout_s)
    return bool(reply.get("stopped")) if isinstance(reply, dict) else False
