"""NVML source: the GPUs of the node this process runs on, as GpuPoll records.

The pynvml-compatible module is the boundary, chosen by name with load_nvml_module():
the real `pynvml`, `collectors.simnvml` for a demo without GPUs, or `tests.fake_pynvml`.
NVML is initialised once per process and module. Every device field is read through
Query: a field the GPU does not support is None, a field that fails is None plus a
problem said in words, and a GPU that fell off the bus is left out and reported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from types import ModuleType
from typing import Any, TypeVar

from collectors.http import SourceError
from collectors.records import GpuPoll, GpuProcessRecord, GpuSampleRecord

T = TypeVar("T")
Reader = Callable[[ModuleType, Any], dict[str, Any]]

# NVML says "not available" with all bits set in its unsigned types.
NOT_AVAILABLE = frozenset({-1, 2**32 - 1, 2**64 - 1})

# Bits of nvmlDeviceGetCurrentClocksEventReasons (formerly ...ThrottleReasons).
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"),
    (0x080, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)
KNOWN_THROTTLE_BITS = sum(bit for bit, _ in THROTTLE_REASONS)

INIT_FAILURES = {
    "NVMLError_LibraryNotFound": "no NVIDIA driver on this node (libnvidia-ml.so not found)",
    "NVMLError_DriverNotLoaded": "the NVIDIA kernel driver is not loaded on this node",
    "NVMLError_NoPermission": "this user may not open the NVIDIA devices (/dev/nvidia*)",
    "NVMLError_LibRmVersionMismatch": (
        "libnvidia-ml.so and the loaded kernel driver differ in version "
        "(driver upgraded without a reboot?)"
    ),
}

_init_lock = threading.Lock()
_initialised: set[str] = set()  # modules whose nvmlInit succeeded in this process


def load_nvml_module(name: str = "pynvml") -> ModuleType:
    """Import the pynvml-compatible module `name` (dotted)."""
    try:
        module = importlib.import_module(name)
    except (ImportError, ValueError) as exc:
        raise SourceError(f"NVML: cannot import the NVML module {name!r}: {exc}") from None
    if not hasattr(module, "nvmlInit"):
        raise SourceError(f"NVML: module {name!r} is not pynvml-compatible (no nvmlInit)")
    return module


def ensure_initialised(nvml: ModuleType) -> None:
    """nvmlInit once per process and module; after a failure the next call tries again."""
    with _init_lock:
        if nvml.__name__ in _initialised:
            return
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            reason = INIT_FAILURES.get(type(exc).__name__, f"initialisation failed: {exc}")
            raise SourceError(f"NVML: {reason}") from None
        except (OSError, ValueError) as exc:  # a simulated or fake module's configuration
            raise SourceError(f"NVML: {nvml.__name__} could not start: {exc}") from None
        _initialised.add(nvml.__name__)


def shutdown_nvml(nvml: ModuleType) -> None:
    """nvmlShutdown, when this process initialised `nvml`; the next poll initialises again."""
    with _init_lock:
        if nvml.__name__ not in _initialised:
            return
        _initialised.discard(nvml.__name__)
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def _forget_initialised(nvml: ModuleType) -> None:
    with _init_lock:
        _initialised.discard(nvml.__name__)


class Query:
    """The one way a poll calls NVML. NotSupported (or a function this driver lacks)
    gives `default` silently; any other NVMLError gives `default` and a problem
    "<prefix><label>: <error>"; GpuIsLost propagates, since the whole GPU is gone."""

    def __init__(self, nvml: ModuleType, problems: list[str], prefix: str = "") -> None:
        self.nvml = nvml
        self.problems = problems
        self.prefix = prefix
        self.silent = (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound)

    def __call__(
        self, label: str, fn: Callable[..., T], *args: Any, default: T | None = None
    ) -> T | None:
        try:
            return fn(*args)
        except self.nvml.NVMLError_GpuIsLost:
            raise
        except self.silent:
            return default
        except self.nvml.NVMLError as exc:
            self.problems.append(f"{self.prefix}{label}: {exc}")
            return default


class NvmlSource:
    """Polls every GPU of this node. One per process is expected; two on the same
    module share its initialisation."""

    def __init__(self, module: ModuleType, node: str, simulated: bool = False) -> None:
        self.nvml = module
        self.node = node
        self.simulated = simulated

    def poll(self, now: datetime) -> GpuPoll:
        ensure_initialised(self.nvml)
        count = self._device_count()
        problems: list[str] = []
        driver = Query(self.nvml, problems)("driver version", self.nvml.nvmlSystemGetDriverVersion)
        gpus = [self._read_gpu(index, now, problems) for index in range(count)]
        return GpuPoll(
            node=self.node,
            at=now,
            gpus=tuple(gpu for gpu in gpus if gpu is not None),
            driver_version=_text(driver),
            problems=tuple(problems),
            simulated=self.simulated,
        )

    def _device_count(self) -> int:
        try:
            return int(self.nvml.nvmlDeviceGetCount())
        except self.nvml.NVMLError_Uninitialized:
            _forget_initialised(self.nvml)  # shut down under us: initialise on the next poll
            raise SourceError("NVML was shut down in this process; initialising it again") from None
        except self.nvml.NVMLError as exc:
            raise SourceError(f"NVML: cannot count the GPUs on this node: {exc}") from None

    def _read_gpu(self, index: int, now: datetime, problems: list[str]) -> GpuSampleRecord | None:
        query = Query(self.nvml, problems, f"GPU {index} ")
        uuid: str | None = None
        try:
            handle = query("handle", self.nvml.nvmlDeviceGetHandleByIndex, index)
            if handle is None:
                return None
            uuid = _text(query("UUID", self.nvml.nvmlDeviceGetUUID, handle))
            if uuid is None:
                problems.append(f"GPU {index} left out: without a UUID it cannot be stored")
                return None
            fields = read_fields(query, self.nvml, handle)
        except self.nvml.NVMLError_GpuIsLost as exc:
            known_as = f" ({uuid})" if uuid else ""
            problems.append(f"GPU {index}{known_as} is lost: fell off the bus ({exc})")
            return None
        return GpuSampleRecord(
            node=self.node, gpu_index=index, uuid=uuid, at=now, simulated=self.simulated, **fields
        )


def read_fields(query: Query, nvml: ModuleType, handle: Any) -> dict[str, Any]:
    """Every NVML field of GpuSampleRecord; a reading that fails leaves its fields None."""
    fields: dict[str, Any] = dict.fromkeys(NVML_FIELDS)
    for label, read in READINGS:
        fields.update(query(label, read, nvml, handle) or {})
    return fields


def _text(value: str | bytes | None) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _known(value: Any, kind: Callable[[Any], T]) -> T | None:
    return None if value is None or value in NOT_AVAILABLE else kind(value)


def _float(value: Any) -> float | None:
    return _known(value, float)


def _int(value: Any) -> int | None:
    return _known(value, int)


def _watts(milliwatts: Any) -> float | None:
    value = _float(milliwatts)
    return None if value is None else value / 1000


def decode_throttle(mask: int | None) -> tuple[str, ...] | None:
    """Names of the active throttle reasons; bits the table lacks come out as unknown_0x..."""
    mask = _int(mask)
    if mask is None:
        return None
    names = [name for bit, name in THROTTLE_REASONS if mask & bit]
    rest = mask & ~KNOWN_THROTTLE_BITS
    names += [f"unknown_{1 << b:#x}" for b in range(rest.bit_length()) if rest >> b & 1]
    return tuple(names)


def merge_processes(listed: Iterable[tuple[int, int | None, str]]) -> tuple[GpuProcessRecord, ...]:
    """One record per pid from (pid, used bytes, type) rows, sorted by pid: the first type
    listed (compute before graphics) and the first known memory figure."""
    merged: dict[int, GpuProcessRecord] = {}
    for pid, used, kind in listed:
        seen = merged.get(pid)
        if seen is None:
            merged[pid] = GpuProcessRecord(pid=pid, used_memory_bytes=used, type=kind)
        elif seen.used_memory_bytes is None and used is not None:
            merged[pid] = dataclasses.replace(seen, used_memory_bytes=used)
    return tuple(sorted(merged.values(), key=lambda p: p.pid))


def _one(field: str, convert: Callable[[Any], Any], call: str, *constants: str) -> Reader:
    """A reader of one field: convert(nvml.<call>(handle, *nvml.<constants>))."""

    def read(nvml: ModuleType, handle: Any) -> dict[str, Any]:
        args = [getattr(nvml, name) for name in constants]
        return {field: convert(getattr(nvml, call)(handle, *args))}

    return read


def _utilization(nvml: ModuleType, handle: Any) -> dict[str, Any]:
    rates = nvml.nvmlDeviceGetUtilizationRates(handle)
    return {"utilization_gpu": _float(rates.gpu), "utilization_memory": _float(rates.memory)}


def _memory(nvml: ModuleType, handle: Any) -> dict[str, Any]:
    info = nvml.nvmlDeviceGetMemoryInfo(handle)
    return {"memory_used_bytes": _int(info.used), "memory_total_bytes": _int(info.total)}


def _throttle(nvml: ModuleType, handle: Any) -> dict[str, Any]:
    # Renamed "clocks event reasons" in newer drivers; the throttle name is deprecated.
    read = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    read = read or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return {"throttle_reasons": decode_throttle(read(handle))}


def _mig(nvml: ModuleType, handle: Any) -> dict[str, Any]:
    current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    return {"mig_mode": current == nvml.NVML_DEVICE_MIG_ENABLE}


def _processes(nvml: ModuleType, handle: Any) -> dict[str, Any]:
    compute = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    graphics = nvml.nvmlDeviceGetGraphicsRunningProcesses(handle)
    rows = [(p, "compute") for p in compute] + [(p, "graphics") for p in graphics]
    return {"processes": merge_processes((int(p.pid), _int(p.usedGpuMemory), t) for p, t in rows)}


# Names looked up on the module, so the real, simulated and fake ones all serve.
TEMPERATURE, CLOCK = "nvmlDeviceGetTemperature", "nvmlDeviceGetClockInfo"
ECC, ECC_VOLATILE = "nvmlDeviceGetTotalEccErrors", "NVML_VOLATILE_ECC"
ECC_CORRECTED = "NVML_MEMORY_ERROR_TYPE_CORRECTED"
ECC_UNCORRECTED = "NVML_MEMORY_ERROR_TYPE_UNCORRECTED"
# (label in problems, reader): each reader makes the NVML call for one or a few fields.
READINGS: tuple[tuple[str, Reader], ...] = (
    ("name", _one("name", _text, "nvmlDeviceGetName")),
    ("utilization", _utilization),
    ("memory", _memory),
    ("temperature", _one("temperature_c", _float, TEMPERATURE, "NVML_TEMPERATURE_GPU")),
    ("power", _one("power_w", _watts, "nvmlDeviceGetPowerUsage")),
    ("power limit", _one("power_limit_w", _watts, "nvmlDeviceGetEnforcedPowerLimit")),
    ("SM clock", _one("sm_clock_mhz", _int, CLOCK, "NVML_CLOCK_SM")),
    ("memory clock", _one("memory_clock_mhz", _int, CLOCK, "NVML_CLOCK_MEM")),
    ("throttle reasons", _throttle),
    ("corrected ECC errors", _one("ecc_corrected", _int, ECC, ECC_CORRECTED, ECC_VOLATILE)),
    ("uncorrected ECC errors", _one("ecc_uncorrected", _int, ECC, ECC_UNCORRECTED, ECC_VOLATILE)),
    ("MIG mode", _mig),
    ("processes", _processes),
)

# The GpuSampleRecord fields NVML fills in: all None until a reading says otherwise.
NVML_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(GpuSampleRecord)
    if f.name not in ("node", "gpu_index", "uuid", "at", "simulated")
)
