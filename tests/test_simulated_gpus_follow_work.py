"""The simulated GPUs of `make demo` follow the processes that hold them, through the
real NVML code path (NvmlSource over collectors.simnvml): Ray's record of which worker
holds which GPU slot (parsed from the raylet's real reply type), and processes started
with CUDA_VISIBLE_DEVICES, busy as they are. A cluster that cannot be read is said, and
leaves who holds a GPU unknown rather than empty. The real cluster, Tune trials and
their GPUs are in tests/test_demo.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest
from ray.core.generated import common_pb2

from collectors.localray import free_port
from collectors.nvml import NvmlSource, load_nvml_module, shutdown_nvml
from collectors.raygpus import parse_worker_gpus
from collectors.simworkload import CUDA_CONTEXT_BYTES, RayWorkload, visible_devices

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
SPIN = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end: pass"
# The simulation reads every process of this host: the suite's other parts run `make demo`
# and Tune on simulated GPUs 0-3 meanwhile, so the processes here hold GPUs 4-7 of eight.
GPUS = 8
RAY_WORKER_GPU, SLEEPING_GPU, SPINNING_GPU, FREE_GPU = 4, 5, 6, 7


def worker(pid: int, leases: dict[str, list[tuple[int, float]]]) -> common_pb2.CoreWorkerStats:
    stats = common_pb2.CoreWorkerStats(pid=pid)
    for name, slots in leases.items():
        held = stats.used_resources[name]
        for slot, allocation in slots:
            held.resource_slots.add(slot=slot, allocation=allocation)
    return stats


def test_gpu_slots_of_each_worker_as_the_raylet_records_them() -> None:
    workers = [
        worker(101, {"GPU": [(2, 1.0)], "CPU": [(0, 1.0)]}),
        # A Tune trial: its placement group's names, the node's own slot numbers.
        worker(102, {"GPU_group_ab12": [(1, 1.0)], "GPU_group_0_ab12": [(1, 1.0)],
                     "CPU_group_ab12": [(0, 1.0)]}),
        worker(103, {"GPU": [(0, 0.5)]}),  # half a GPU still names its slot
        worker(104, {"CPU": [(0, 1.0)]}),  # no GPU
        worker(0, {"GPU": [(3, 1.0)]}),  # no process
        worker(105, {"GPU": [(3, 0.0)]}),  # a slot with nothing allocated
    ]
    assert parse_worker_gpus(workers) == {101: (2,), 102: (1,), 103: (0,)}


def test_cuda_visible_devices_as_simulated_gpu_indices() -> None:
    assert visible_devices("2,0", 4) == (0, 2)
    assert visible_devices("3, 7", 4) == (3,)  # no GPU 7 among four
    assert visible_devices("GPU-5f1c,MIG-1", 4) == ()  # UUIDs are not simulated
    assert visible_devices("", 4) == visible_devices(None, 4) == ()


@pytest.fixture
def started_with_gpus() -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """A process spinning on GPU 6, one sleeping on GPU 5, a sleeping Ray worker whose
    environment names GPU 4 (Ray's record decides for Ray workers), one naming none."""
    base = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    processes = {
        "spinning": subprocess.Popen([sys.executable, "-c", SPIN],
                                     env={**base, "CUDA_VISIBLE_DEVICES": f"{SPINNING_GPU}"}),
        "sleeping": subprocess.Popen(sleep, env={**base,
                                                 "CUDA_VISIBLE_DEVICES": f"{SLEEPING_GPU}"}),
        "ray_worker": subprocess.Popen(["bash", "-c", 'exec -a "ray::IDLE" sleep 60'],
                                       env={**base,
                                            "CUDA_VISIBLE_DEVICES": f"{RAY_WORKER_GPU}"}),
        "no_gpu": subprocess.Popen(sleep, env=base),
    }
    # bash renames itself by exec a moment after it starts; read before that, it is no
    # Ray worker yet (as a real one is python until it names itself).
    deadline = time.monotonic() + 10
    while not Path(f"/proc/{processes['ray_worker'].pid}/cmdline").read_bytes().startswith(
            b"ray::") and time.monotonic() < deadline:
        time.sleep(0.01)
    yield processes
    for process in processes.values():
        process.kill()
        process.wait()


@pytest.fixture
def simnvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The simulated module following a cluster whose GCS does not answer."""
    monkeypatch.setenv("RAYWATCH_SIM_GPUS", str(GPUS))
    monkeypatch.setenv("RAYWATCH_SIM_GCS", f"127.0.0.1:{free_port()}")
    module = load_nvml_module("collectors.simnvml")
    shutdown_nvml(module)  # read the environment afresh at the next nvmlInit
    yield module
    shutdown_nvml(module)


def test_processes_started_with_cuda_visible_devices_hold_their_gpus(
    started_with_gpus: dict[str, subprocess.Popen[bytes]]
) -> None:
    clock = [0.0]
    workload = RayWorkload(f"127.0.0.1:{free_port()}", None, GPUS, clock=lambda: clock[0])
    workload.holders()  # the first reading starts each process's CPU measurement
    clock[0] += 1.0
    time.sleep(1)  # CPU time for the spinning process to show
    holders, problem = workload.holders()

    spinning, sleeping = started_with_gpus["spinning"].pid, started_with_gpus["sleeping"].pid
    assert [h.pid for h in holders[SPINNING_GPU]] == [spinning]
    assert [h.pid for h in holders[SLEEPING_GPU]] == [sleeping]
    # The Ray worker is Ray's to tell.
    assert holders[RAY_WORKER_GPU] == [] and holders[FREE_GPU] == []
    assert holders[SPINNING_GPU][0].cpu_percent > 5 and holders[SLEEPING_GPU][0].cpu_percent < 5
    assert all(h.memory_bytes > CUDA_CONTEXT_BYTES
               for h in holders[SLEEPING_GPU] + holders[SPINNING_GPU])
    assert problem is not None and "cannot list the nodes of the Ray cluster" in problem


def test_unreadable_cluster_leaves_gpu_holders_unknown_through_the_nvml_path(
    simnvml: ModuleType, started_with_gpus: dict[str, subprocess.Popen[bytes]]
) -> None:
    poll = NvmlSource(simnvml, "demo", simulated=True).poll(NOW)

    assert [g.gpu_index for g in poll.gpus] == list(range(GPUS))
    by_index = {g.gpu_index: g for g in poll.gpus}
    assert all(g.simulated and g.processes is None for g in poll.gpus)
    assert sorted(poll.problems) == sorted(f"GPU {i} processes: Unknown Error"
                                           for i in range(GPUS))
    sleeping = by_index[SLEEPING_GPU].memory_used_bytes
    assert sleeping and sleeping > CUDA_CONTEXT_BYTES
    assert by_index[RAY_WORKER_GPU].memory_used_bytes == 0
    assert by_index[FREE_GPU].memory_used_bytes == 0
