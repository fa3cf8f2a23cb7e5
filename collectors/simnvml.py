"""A pynvml-compatible module that simulates GPUs, for a demo on a machine without any.

Load it by name, load_nvml_module("collectors.simnvml"), where the real pynvml would
be. Read at nvmlInit: RAYWATCH_SIM_GPUS (default 4), how many GPUs; RAYWATCH_SIM_GCS,
the GCS address (HOST:PORT) of a Ray cluster that was told it has that many GPUs
(`num_gpus=N`, as `make demo` starts it), and its token as Ray's clients find it
(RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token).

With RAYWATCH_SIM_GCS the GPUs follow that cluster's workload (collectors/simworkload.py):
each is held by the Ray worker Ray leased it to (and by processes started with
CUDA_VISIBLE_DEVICES naming it), with their memory, and is as busy as they are.
Without it, load follows slow deterministic waves of the clock, with a different phase
per GPU, the last GPU stays idle, and no processes are listed.

DeviceTable is the pynvml surface over GpuState rows; tests/fake_pynvml.py reuses it
with GPUs that a test sets by hand.
"""

from __future__ import annotations

import hashlib
import math
import os
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml

from collectors.rayaddress import read_token
from collectors.simworkload import Holder, RayWorkload

GIB = 1024**3
Processes = Iterable[tuple[int, int | None]]  # (pid, used bytes or None)


@dataclass
class GpuState:
    """What one GPU reports, in NVML's units. `unsupported` names fields NVML refuses
    with NotSupported; `errors` maps a field to the NVMLError it raises ("Unknown",
    "GpuIsLost"); a `lost` GPU refuses even its handle. Field names: handle, name,
    uuid, utilization, memory, temperature, power, power_limit, sm_clock, mem_clock,
    throttle, ecc_corrected, ecc_uncorrected, mig, processes, graphics_processes."""

    uuid: str | bytes
    name: str | bytes = "Simulated A100 80GB"
    util: int = 0
    mem_util: int = 0
    mem_used: int = 0
    mem_total: int = 80 * GIB
    temp: int = 30
    power_mw: int = 55_000
    power_limit_mw: int = 400_000
    sm_clock: int = 210
    mem_clock: int = 1593
    throttle_mask: int = 0
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    mig: bool = False
    processes: Processes = ()
    graphics_processes: Processes = ()
    unsupported: Iterable[str] = ()
    errors: dict[str, str] = field(default_factory=dict)
    lost: bool = False


def nvml_error(suffix: str) -> pynvml.NVMLError:
    """The real pynvml exception, by class suffix: "NotSupported" -> NVMLError_NotSupported()."""
    error: pynvml.NVMLError = getattr(pynvml, f"NVMLError_{suffix}")()
    return error


class DeviceTable:
    """The pynvml functions raywatch calls, over GPUs a subclass provides."""

    driver_version = "simulated"

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.init_calls = 0
        self.initialised = False
        self.failures: dict[str, str] = {}  # "init" / "count" / "driver_version" -> suffix

    def start(self) -> None:
        """nvmlInit's own work; raise to refuse."""

    def count(self) -> int:
        raise NotImplementedError

    def gpu(self, index: int) -> GpuState:
        raise NotImplementedError

    def _system(self, call: str) -> None:
        if call in self.failures:
            raise nvml_error(self.failures[call])
        if not self.initialised:
            raise nvml_error("Uninitialized")

    def _gpu(self, handle: int, name: str) -> GpuState:
        self._system("device")
        gpu = self.gpu(handle)
        if gpu.lost:
            raise nvml_error("GpuIsLost")
        if name in gpu.unsupported:
            raise nvml_error("NotSupported")
        if name in gpu.errors:
            raise nvml_error(gpu.errors[name])
        return gpu

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if "init" in self.failures:
            raise nvml_error(self.failures["init"])
        self.start()
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._system("shutdown")
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self._system("driver_version")
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._system("count")
        return self.count()

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._system("handle")
        if not 0 <= index < self.count():
            raise nvml_error("InvalidArgument")
        self._gpu(index, "handle")
        return index

    def nvmlDeviceGetName(self, handle: int) -> str | bytes:
        return self._gpu(handle, "name").name

    def nvmlDeviceGetUUID(self, handle: int) -> str | bytes:
        return self._gpu(handle, "uuid").uuid

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        gpu = self._gpu(handle, "utilization")
        return pynvml.c_nvmlUtilization_t(gpu=gpu.util, memory=gpu.mem_util)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        gpu = self._gpu(handle, "memory")
        free = gpu.mem_total - gpu.mem_used
        return pynvml.c_nvmlMemory_t(total=gpu.mem_total, free=free, used=gpu.mem_used)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return self._gpu(handle, "temperature").temp

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return self._gpu(handle, "power").power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        return self._gpu(handle, "power_limit").power_limit_mw

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        if clock == pynvml.NVML_CLOCK_SM:
            return self._gpu(handle, "sm_clock").sm_clock
        return self._gpu(handle, "mem_clock").mem_clock

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        return self._gpu(handle, "throttle").throttle_mask

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: int) -> int:
        return self.nvmlDeviceGetCurrentClocksEventReasons(handle)

    def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter: int) -> int:
        if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return self._gpu(handle, "ecc_corrected").ecc_corrected
        return self._gpu(handle, "ecc_uncorrected").ecc_uncorrected

    def nvmlDeviceGetMigMode(self, handle: int) -> list[int]:
        enabled = self._gpu(handle, "mig").mig
        return [pynvml.NVML_DEVICE_MIG_ENABLE if enabled else pynvml.NVML_DEVICE_MIG_DISABLE] * 2

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return _process_list(self._gpu(handle, "processes").processes)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> list[Any]:
        return _process_list(self._gpu(handle, "graphics_processes").graphics_processes)


def _process_list(processes: Processes) -> list[Any]:
    return [pynvml.nvmlFriendlyObject({"pid": p, "usedGpuMemory": m}) for p, m in processes]


def module_namespace(table: DeviceTable) -> dict[str, Any]:
    """What a pynvml-compatible module exports: pynvml's own constants and exception
    classes (so `except pynvml.NVMLError_...` holds), and the table's nvml* functions."""
    constants = {n: getattr(pynvml, n) for n in dir(pynvml) if n.startswith(("NVML", "nvmlClocks"))}
    return constants | {n: getattr(table, n) for n in dir(DeviceTable) if n.startswith("nvml")}


class SimulatedTable(DeviceTable):
    def __init__(self) -> None:
        super().__init__()
        self.gpus = 0
        self.host = ""
        self.workload: RayWorkload | None = None

    def start(self) -> None:
        self.gpus = sim_gpu_count(os.environ.get("RAYWATCH_SIM_GPUS", "4"))
        self.host = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]
        gcs = os.environ.get("RAYWATCH_SIM_GCS", "").strip()
        self.workload = RayWorkload(gcs, ray_token(), self.gpus) if gcs else None

    def count(self) -> int:
        return self.gpus

    def gpu(self, index: int) -> GpuState:
        if self.workload is None:
            return simulated_gpu(self.host, index, self.gpus, time.time())
        holders, problem = self.workload.holders()
        return held_gpu(self.host, index, holders.get(index, []), ray_unread=problem is not None)


def ray_token() -> str | None:
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    return read_token(os.environ.get("RAY_AUTH_TOKEN"), path)


def sim_gpu_count(raw: str) -> int:
    if not raw.strip().isdigit() or int(raw) > 64:
        raise ValueError(f"RAYWATCH_SIM_GPUS must be a whole number from 0 to 64, not {raw!r}")
    return int(raw)


def simulated_gpu(host: str, index: int, count: int, now: float) -> GpuState:
    """GPU `index` at `now`: load on a ~10-minute wave with its own phase; the last of
    several GPUs idles."""
    idle = count > 1 and index == count - 1
    util = 0 if idle else round(60 + 40 * math.sin(now / 90 + index * 1.3))
    mem_gib = 0.4 if idle else 40 + 30 * math.sin(now / 300 + index * 2.1)
    return loaded_gpu(host, index, util, round(mem_gib * GIB))


def held_gpu(host: str, index: int, holders: list[Holder], ray_unread: bool) -> GpuState:
    """GPU `index` as busy as its holders, holding their memory. When Ray's workers could
    not be read, its process list is an error: who holds it is unknown."""
    util = min(100, round(sum(h.cpu_percent for h in holders)))
    gpu = loaded_gpu(host, index, util, sum(h.memory_bytes for h in holders))
    gpu.processes = tuple((h.pid, h.memory_bytes) for h in holders)
    if ray_unread:
        gpu.errors["processes"] = "Unknown"
    return gpu


def loaded_gpu(host: str, index: int, util: int, mem_used: int) -> GpuState:
    """A GPU at `util` % holding `mem_used` bytes: temperature, power and clocks follow."""
    idle = util < 5
    capped = util >= 95  # near full load the board runs into its power cap
    return GpuState(
        uuid=f"GPU-sim-{host}-{index}",
        util=util,
        mem_util=round(util * 0.6),
        mem_used=mem_used,
        temp=round(32 + 0.45 * util),
        power_mw=55_000 + 3_400 * util,
        sm_clock=210 if idle else (1275 if capped else 1410),
        throttle_mask=0x1 if idle else (0x4 if capped else 0),
    )


_TABLE = SimulatedTable()
# The module's pynvml surface: nvmlInit, nvmlDeviceGetCount, ..., NVML_*, NVMLError_*.
globals().update(module_namespace(_TABLE))
