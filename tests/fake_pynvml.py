"""A fake pynvml for tests: GPUs that a test sets by hand, the real pynvml exceptions.

In-process tests call reset(), add_gpu(...), set_gpu(...), set_init_error(...) and read
init_calls(). Agent subprocesses (Celery workers) cannot be reached that way: they load
this module with load_nvml_module("tests.fake_pynvml") and set FAKE_NVML_SPEC to a JSON
file, {"gpus": [{...add_gpu's keys...}], "driver_version": "..."}, read at nvmlInit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from collectors.simnvml import DeviceTable, GpuState, module_namespace

DRIVER_VERSION = "550.54.15"


class FakeTable(DeviceTable):
    def reset(self) -> None:
        super().reset()
        self.driver_version = DRIVER_VERSION
        self.devices: list[GpuState] = []

    def start(self) -> None:
        spec = os.environ.get("FAKE_NVML_SPEC")
        if spec:
            self.load(Path(spec))

    def load(self, path: Path) -> None:
        spec = json.loads(path.read_text())
        self.driver_version = spec.get("driver_version", DRIVER_VERSION)
        self.devices = []
        for fields in spec.get("gpus", []):
            add_gpu(**fields)

    def count(self) -> int:
        return len(self.devices)

    def gpu(self, index: int) -> GpuState:
        return self.devices[index]


_TABLE = FakeTable()
# The module's pynvml surface: nvmlInit, nvmlDeviceGetCount, ..., NVML_*, NVMLError_*.
globals().update(module_namespace(_TABLE))


def reset() -> None:
    """No GPUs, no failures, not initialised, init counter at zero."""
    _TABLE.reset()


def add_gpu(**fields: Any) -> int:
    """Add a GPU (GpuState's fields; uuid defaults to GPU-fake-<index>); its index."""
    index = len(_TABLE.devices)
    fields.setdefault("uuid", f"GPU-fake-{index}")
    fields.setdefault("name", "NVIDIA A100-SXM4-80GB")
    try:
        _TABLE.devices.append(GpuState(**fields))
    except TypeError as exc:
        raise ValueError(f"fake GPU {index}: {exc}") from None
    return index


def set_gpu(index: int, **changes: Any) -> None:
    gpu = _TABLE.devices[index]
    for name, value in changes.items():
        if not hasattr(gpu, name):
            raise ValueError(f"fake GPU {index} has no field {name!r}")
        setattr(gpu, name, value)


def set_init_error(suffix: str | None) -> None:
    """Make nvmlInit raise NVMLError_<suffix> ("LibraryNotFound", ...); None: succeed."""
    _set_failure("init", suffix)


def set_count_error(suffix: str | None) -> None:
    _set_failure("count", suffix)


def set_driver_version_error(suffix: str | None) -> None:
    _set_failure("driver_version", suffix)


def _set_failure(call: str, suffix: str | None) -> None:
    if suffix is None:
        _TABLE.failures.pop(call, None)
    else:
        _TABLE.failures[call] = suffix


def init_calls() -> int:
    return _TABLE.init_calls


def initialised() -> bool:
    return _TABLE.initialised
