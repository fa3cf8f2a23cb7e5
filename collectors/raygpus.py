"""Which GPUs Ray gave each worker process on this host, as the raylets record them.

Ray sets a worker's CUDA_VISIBLE_DEVICES in the worker's own os.environ when a task or
actor with GPUs starts in it, long after the process began: /proc/<pid>/environ shows
only the environment a process started with, and never has it (docs/ray-facts.md). The
raylet that leased the GPUs knows: its GetNodeStats RPC lists each core worker's pid
and the GPU slots it holds. Like raykill's GCS calls, this is Ray's internal gRPC API
(collectors/raygrpc.py); the simulated GPU source of `make demo` is its user.

fetch_*() do the I/O; parse_worker_gpus() is pure.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from collectors.raygrpc import call

ALIVE = 0  # GcsNodeInfo.GcsNodeState.ALIVE


def fetch_raylets(gcs_address: str, token: str | None, local_ips: Collection[str],
                  timeout_s: float = 5.0) -> list[str]:
    """HOST:PORT of the cluster's live raylets on this host that have GPUs."""
    from ray.core.generated import gcs_service_pb2 as pb2
    from ray.core.generated.gcs_service_pb2_grpc import NodeInfoGcsServiceStub

    reply = call(gcs_address, NodeInfoGcsServiceStub, "GetAllNodeInfo",
                 pb2.GetAllNodeInfoRequest(), token, timeout_s,
                 f"cannot list the nodes of the Ray cluster at {gcs_address}")
    return sorted(
        f"{node.node_manager_address}:{node.node_manager_port}"
        for node in reply.node_info_list
        if node.state == ALIVE and node.node_manager_address in local_ips
        and node.resources_total.get("GPU", 0) > 0
    )


def fetch_worker_gpus(raylet: str, token: str | None, timeout_s: float = 5.0
                      ) -> dict[int, tuple[int, ...]]:
    """pid -> the GPU slots the raylet at `raylet` (HOST:PORT) leased to that worker."""
    from ray.core.generated import node_manager_pb2 as pb2
    from ray.core.generated.node_manager_pb2_grpc import NodeManagerServiceStub

    reply = call(raylet, NodeManagerServiceStub, "GetNodeStats",
                 pb2.GetNodeStatsRequest(include_memory_info=False), token, timeout_s,
                 f"cannot read the workers of the raylet at {raylet}")
    return parse_worker_gpus(reply.core_workers_stats)


def parse_worker_gpus(workers: Iterable[Any]) -> dict[int, tuple[int, ...]]:
    """From CoreWorkerStats: pid -> its GPU slots (sorted), for workers that hold any.
    A worker in a placement group (every Tune trial) holds them under the group's names,
    `GPU_group_<pg>` and `GPU_group_<bundle>_<pg>`, with the node's own slot numbers. A
    fractional lease (num_gpus=0.5) still names its slot."""
    found: dict[int, tuple[int, ...]] = {}
    for worker in workers:
        slots = {int(s.slot) for name, held in worker.used_resources.items()
                 if name == "GPU" or name.startswith("GPU_group_")
                 for s in held.resource_slots if s.allocation > 0}
        if worker.pid > 0 and slots:
            found[int(worker.pid)] = tuple(sorted(slots))
    return dict(sorted(found.items()))
