"""Ending things in Ray from outside the driver (docs/ray-facts.md, "Ending a hung
trial, a job, a process"): Ray 2.60 has no public call to kill an unnamed actor, so this
uses the GCS's KillActorViaGcs RPC (internal API: ray is pinned with == for it, and
tests/test_terminate_trial.py checks it on a real cluster), and the Jobs API to stop
a job. Django-free, like every collector.
"""

from __future__ import annotations

from typing import Any

from collectors.http import SourceError, post_json
from collectors.raystate import RayEndpoint

ACTOR_STATES = {0: "DEPENDENCIES_UNREADY", 1: "PENDING_CREATION", 2: "ALIVE", 3: "RESTARTING",
                4: "DEAD"}


def _stub(gcs_address: str) -> tuple[Any, Any, Any]:
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    channel = grpc.insecure_channel(gcs_address)
    return channel, gcs_service_pb2, gcs_service_pb2_grpc.ActorInfoGcsServiceStub(channel)


def _metadata(token: str | None) -> list[tuple[str, str]] | None:
    return [("authorization", f"Bearer {token}")] if token else None


def kill_actor(gcs_address: str, token: str | None, actor_id: str, force: bool,
               timeout_s: float = 5.0) -> None:
    """Ask the GCS to kill the actor: force=False lets its running task finish first
    (useless for a hung trial), force=True kills its worker process now."""
    import grpc

    channel, pb2, stub = _stub(gcs_address)
    try:
        reply = stub.KillActorViaGcs(
            pb2.KillActorViaGcsRequest(actor_id=bytes.fromhex(actor_id), force_kill=force,
                                       no_restart=True),
            metadata=_metadata(token), timeout=timeout_s)
    except grpc.RpcError as exc:
        raise SourceError(f"the Ray GCS at {gcs_address} refused the kill: "
                          f"{exc.code().name}: {exc.details()}") from None
    except ValueError:
        raise SourceError(f"not an actor id: {actor_id!r}") from None
    finally:
        channel.close()
    if reply.status.code != 0:
        raise SourceError(f"the Ray GCS could not kill actor {actor_id}: {reply.status.message}")


def actor_state(gcs_address: str, token: str | None, actor_id: str,
                timeout_s: float = 5.0) -> str:
    """DEAD, ALIVE, … as the GCS sees the actor now."""
    import grpc

    channel, pb2, stub = _stub(gcs_address)
    try:
        reply = stub.GetActorInfo(pb2.GetActorInfoRequest(actor_id=bytes.fromhex(actor_id)),
                                  metadata=_metadata(token), timeout=timeout_s)
    except grpc.RpcError as exc:
        raise SourceError(f"cannot reach the Ray GCS at {gcs_address}: "
                          f"{exc.code().name}: {exc.details()}") from None
    finally:
        channel.close()
    return ACTOR_STATES.get(reply.actor_table_data.state, "UNKNOWN")


def stop_job(endpoint: RayEndpoint, submission_id: str) -> bool:
    """POST /api/jobs/{id}/stop: True when Ray stopped it, False when it had ended."""
    reply = post_json(f"{endpoint.dashboard_url}/api/jobs/{submission_id}/stop", {},
                      headers=endpoint.headers(), timeout=endpoint.timeout_s)
    return bool(reply.get("stopped")) if isinstance(reply, dict) else False
