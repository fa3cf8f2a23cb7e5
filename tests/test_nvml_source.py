"""The NVML source: every GPU field in raywatch's units, None for what NVML cannot
tell, problems in words, NVML initialised once, and the simulated module for demos.

The GPUs are tests/fake_pynvml.py's, injected by module name as the agent does it.
No database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

import pytest
import time_machine

from collectors.http import SourceError
from collectors.nvml import NvmlSource, load_nvml_module, shutdown_nvml
from collectors.records import GpuPoll, GpuProcessRecord, GpuSampleRecord
from tests import fake_pynvml

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
GIB = 1024**3
NOT_AVAILABLE = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE_ulonglong
REPO = Path(__file__).resolve().parent.parent

# fake GPU field -> (the record fields it fills, its name in problems)
FIELDS = {
    "name": (("name",), "name"),
    "utilization": (("utilization_gpu", "utilization_memory"), "utilization"),
    "memory": (("memory_used_bytes", "memory_total_bytes"), "memory"),
    "temperature": (("temperature_c",), "temperature"),
    "power": (("power_w",), "power"),
    "power_limit": (("power_limit_w",), "power limit"),
    "sm_clock": (("sm_clock_mhz",), "SM clock"),
    "mem_clock": (("memory_clock_mhz",), "memory clock"),
    "throttle": (("throttle_reasons",), "throttle reasons"),
    "ecc_corrected": (("ecc_corrected",), "corrected ECC errors"),
    "ecc_uncorrected": (("ecc_uncorrected",), "uncorrected ECC errors"),
    "mig": (("mig_mode",), "MIG mode"),
    "processes": (("processes",), "processes"),
}
RECORD_FIELDS = [f for fields, _ in FIELDS.values() for f in fields]


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.delenv("FAKE_NVML_SPEC", raising=False)
    module = load_nvml_module("tests.fake_pynvml")
    shutdown_nvml(module)  # an earlier test in this process may have left it initialised
    fake_pynvml.reset()
    yield module
    shutdown_nvml(module)


@pytest.fixture
def simnvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.setenv("RAYWATCH_SIM_GPUS", "3")
    module = load_nvml_module("collectors.simnvml")
    shutdown_nvml(module)  # read RAYWATCH_SIM_GPUS afresh, whoever initialised it before
    yield module
    shutdown_nvml(module)


def poll(nvml: ModuleType, simulated: bool = False) -> GpuPoll:
    return NvmlSource(nvml, "gpu-node-1", simulated=simulated).poll(NOW)


def only_gpu(nvml: ModuleType) -> GpuSampleRecord:
    result = poll(nvml)
    assert len(result.gpus) == 1, result
    return result.gpus[0]


# --- fields and units ----------------------------------------------------------------
def test_every_field_is_read_in_raywatch_units(nvml: ModuleType) -> None:
    fake_pynvml.add_gpu(
        uuid="GPU-5f2a", name="NVIDIA H100 80GB HBM3", util=87, mem_util=41,
        mem_used=61 * GIB, mem_total=80 * GIB, temp=71, power_mw=612_345,
        power_limit_mw=700_000, sm_clock=1980, mem_clock=2619, throttle_mask=0x4,
        ecc_corrected=3, ecc_uncorrected=1, mig=False, processes=[(4242, 60 * GIB)],
    )  # fmt: skip

    result = poll(nvml)

    assert result == GpuPoll(
        node="gpu-node-1",
        at=NOW,
        driver_version=fake_pynvml.DRIVER_VERSION,
        gpus=(
            GpuSampleRecord(
                node="gpu-node-1", gpu_index=0, uuid="GPU-5f2a", at=NOW,
                name="NVIDIA H100 80GB HBM3", utilization_gpu=87.0, utilization_memory=41.0,
                memory_used_bytes=61 * GIB, memory_total_bytes=80 * GIB, temperature_c=71.0,
                power_w=612.345, power_limit_w=700.0, sm_clock_mhz=1980, memory_clock_mhz=2619,
                throttle_reasons=("sw_power_cap",), ecc_corrected=3, ecc_uncorrected=1,
                mig_mode=False, processes=(GpuProcessRecord(4242, 60 * GIB, "compute"),),
            ),
        ),
    )


def test_records_come_sorted_by_gpu_index(nvml: ModuleType) -> None:
    for uuid in ("GPU-c", "GPU-a", "GPU-b"):
        fake_pynvml.add_gpu(uuid=uuid)

    gpus = poll(nvml).gpus

    assert [(g.gpu_index, g.uuid) for g in gpus] == [(0, "GPU-c"), (1, "GPU-a"), (2, "GPU-b")]


def test_unsupported_fields_are_none_never_zero_or_minus_one(nvml: ModuleType) -> None:
    unsupported = {*FIELDS, "graphics_processes"}
    fake_pynvml.add_gpu(uuid="GPU-old", unsupported=unsupported)

    result = poll(nvml)

    assert result.problems == ()
    gpu = result.gpus[0]
    assert gpu.uuid == "GPU-old"
    assert {f: getattr(gpu, f) for f in RECORD_FIELDS} == dict.fromkeys(RECORD_FIELDS)


def test_not_available_values_are_none(nvml: ModuleType) -> None:
    fake_pynvml.add_gpu(
        power_mw=NOT_AVAILABLE, ecc_corrected=NOT_AVAILABLE, temp=2**32 - 1,
        throttle_mask=NOT_AVAILABLE, mem_used=NOT_AVAILABLE,
    )  # fmt: skip

    gpu = only_gpu(nvml)

    assert (gpu.power_w, gpu.ecc_corrected, gpu.temperature_c) == (None, None, None)
    assert (gpu.throttle_reasons, gpu.memory_used_bytes) == (None, None)
    assert gpu.memory_total_bytes == 80 * GIB


@pytest.mark.parametrize("field", FIELDS)
def test_a_failing_field_is_none_and_reported(nvml: ModuleType, field: str) -> None:
    fake_pynvml.add_gpu(uuid="GPU-a")
    fake_pynvml.add_gpu(uuid="GPU-b", errors={field: "Unknown"})
    failed, label = FIELDS[field]

    result = poll(nvml)

    assert result.problems == (f"GPU 1 {label}: Unknown Error",)
    healthy, broken = result.gpus
    assert [getattr(broken, f) for f in failed] == [None] * len(failed)
    others = [f for f in RECORD_FIELDS if f not in failed]
    assert None not in [getattr(broken, f) for f in others]
    assert None not in [getattr(healthy, f) for f in RECORD_FIELDS]


def test_a_function_the_driver_lacks_is_none_without_a_problem(nvml: ModuleType) -> None:
    fake_pynvml.add_gpu(errors={"mig": "FunctionNotFound"}, mig=True)

    result = poll(nvml)

    assert result.problems == ()
    assert result.gpus[0].mig_mode is None


def test_driver_version_that_fails_is_none_and_reported(nvml: ModuleType) -> None:
    fake_pynvml.add_gpu()
    fake_pynvml.set_driver_version_error("Unknown")

    result = poll(nvml)

    assert result.driver_version is None
    assert result.problems == ("driver version: Unknown Error",)
    assert len(result.gpus) == 1


def test_bytes_uuid_and_name_are_decoded(nvml: ModuleType) -> None:
    fake_pynvml.add_gpu(uuid=b"GPU-8c1e-bytes", name=b"Tesla V100-SXM2-32GB")

    gpu = only_gpu(nvml)

    assert (gpu.uuid, gpu.name) == ("GPU-8c1e-bytes", "Tesla V100-SXM2-32GB")


@pytest.mark.parametrize(
    ("mask", "reasons"),
    [
        (0, ()),
        (0x1, ("gpu_idle",)),
        (0x44, ("sw_power_cap", "hw_thermal_slowdown")),
        (0x88, ("hw_slowdown", "hw_power_brake_slowdown")),
        (
            0x1FF,
            (
                "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
                "sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown",
                "hw_power_brake_slowdown", "display_clock_setting",
            ),
        ),
        (0x1000 | 0x20, ("sw_thermal_slowdown", "unknown_0x1000")),
    ],
)
def test_throttle_reasons_are_decoded_by_name(
    nvml: ModuleType, mask: int, reasons: tuple[str, ...]
) -> None:
    fake_pynvml.add_gpu(throttle_mask=mask)

    assert only_gpu(nvml).throttle_reasons == reasons


def test_throttle_reasons_from_a_pynvml_without_clocks_event_reasons(nvml: ModuleType) -> None:
    older = ModuleType(nvml.__name__)
    vars(older).update(
        (name, value)
        for name, value in vars(nvml).items()
        if name != "nvmlDeviceGetCurrentClocksEventReasons"
    )
    fake_pynvml.add_gpu(throttle_mask=0x40)

    assert only_gpu(older).throttle_reasons == ("hw_thermal_slowdown",)


@pytest.mark.parametrize("mig", [True, False])
def test_mig_mode(nvml: ModuleType, mig: bool) -> None:
    fake_pynvml.add_gpu(mig=mig)

    assert only_gpu(nvml).mig_mode is mig


# --- processes -------------------------------------------------------------------------
def test_compute_and_graphics_processes_are_merged_by_pid(nvml: ModuleType) -> None:
    fake_pynvml.add_gpu(
        processes=[(300, 2 * GIB), (100, None), (200, 5 * GIB)],
        graphics_processes=[(100, 512 * 1024**2), (300, 2 * GIB), (400, None)],
    )

    assert only_gpu(nvml).processes == (
        GpuProcessRecord(pid=100, used_memory_bytes=512 * 1024**2, type="compute"),
        GpuProcessRecord(pid=200, used_memory_bytes=5 * GIB, type="compute"),
        GpuProcessRecord(pid=300, used_memory_bytes=2 * GIB, type="compute"),
        GpuProcessRecord(pid=400, used_memory_bytes=None, type="graphics"),
    )


def test_process_memory_nvml_does_not_know_is_none(nvml: ModuleType) -> None:
    fake_pynvml.add_gpu(processes=[(11, None), (12, NOT_AVAILABLE)], mig=True)

    assert only_gpu(nvml).processes == (
        GpuProcessRecord(pid=11, used_memory_bytes=None),
        GpuProcessRecord(pid=12, used_memory_bytes=None),
    )


def test_no_processes_is_an_empty_tuple(nvml: ModuleType) -> None:
    fake_pynvml.add_gpu()

    assert only_gpu(nvml).processes == ()


@pytest.mark.parametrize("listing", ["processes", "graphics_processes"])
def test_processes_are_none_when_listing_fails(nvml: ModuleType, listing: str) -> None:
    fake_pynvml.add_gpu(processes=[(7, GIB)], errors={listing: "InsufficientSize"})

    result = poll(nvml)

    assert result.gpus[0].processes is None
    assert result.problems == ("GPU 0 processes: Insufficient Size",)


def test_processes_are_none_without_a_problem_when_unsupported(nvml: ModuleType) -> None:
    fake_pynvml.add_gpu(processes=[(7, GIB)], unsupported={"processes"})

    result = poll(nvml)

    assert (result.gpus[0].processes, result.problems) == (None, ())


# --- lost GPUs -------------------------------------------------------------------------
def test_a_lost_gpu_is_left_out_and_reported(nvml: ModuleType) -> None:
    for uuid in ("GPU-a", "GPU-b", "GPU-c"):
        fake_pynvml.add_gpu(uuid=uuid)
    fake_pynvml.set_gpu(1, lost=True)

    result = poll(nvml)

    assert [(g.gpu_index, g.uuid) for g in result.gpus] == [(0, "GPU-a"), (2, "GPU-c")]
    assert result.problems == ("GPU 1 is lost: fell off the bus (GPU is lost)",)


def test_a_gpu_lost_in_the_middle_of_a_poll_is_reported_with_its_uuid(nvml: ModuleType) -> None:
    fake_pynvml.add_gpu(uuid="GPU-3d9f", errors={"power": "GpuIsLost"})
    fake_pynvml.add_gpu(uuid="GPU-fine")

    result = poll(nvml)

    assert [g.uuid for g in result.gpus] == ["GPU-fine"]
    assert result.problems == ("GPU 0 (GPU-3d9f) is lost: fell off the bus (GPU is lost)",)


def test_a_gpu_that_cannot_be_opened_is_left_out_and_reported(nvml: ModuleType) -> None:
    fake_pynvml.add_gpu(errors={"handle": "NoPermission"})
    fake_pynvml.add_gpu(uuid="GPU-mine")

    result = poll(nvml)

    assert [g.uuid for g in result.gpus] == ["GPU-mine"]
    assert result.problems == ("GPU 0 handle: Insufficient Permissions",)


def test_a_gpu_without_uuid_is_left_out_and_reported(nvml: ModuleType) -> None:
    fake_pynvml.add_gpu(errors={"uuid": "Unknown"})

    result = poll(nvml)

    assert result.gpus == ()
    assert result.problems == (
        "GPU 0 UUID: Unknown Error",
        "GPU 0 left out: without a UUID it cannot be stored",
    )


# --- initialisation ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("error", "reason"),
    [
        ("LibraryNotFound", "NVML: no NVIDIA driver on this node (libnvidia-ml.so not found)"),
        ("DriverNotLoaded", "NVML: the NVIDIA kernel driver is not loaded on this node"),
        ("NoPermission", "NVML: this user may not open the NVIDIA devices (/dev/nvidia*)"),
        ("Unknown", "NVML: initialisation failed: Unknown Error"),
    ],
)
def test_init_failure_says_why_and_the_next_poll_tries_again(
    nvml: ModuleType, error: str, reason: str
) -> None:
    fake_pynvml.add_gpu(uuid="GPU-back")
    fake_pynvml.set_init_error(error)
    source = NvmlSource(nvml, "gpu-node-1")

    with pytest.raises(SourceError) as failure:
        source.poll(NOW)
    assert failure.value.message == reason

    fake_pynvml.set_init_error(None)
    assert [g.uuid for g in source.poll(NOW).gpus] == ["GPU-back"]
    assert fake_pynvml.init_calls() == 2


def test_nvml_is_initialised_once_across_polls_and_sources(nvml: ModuleType) -> None:
    fake_pynvml.add_gpu()
    first = NvmlSource(nvml, "gpu-node-1")
    second = NvmlSource(load_nvml_module("tests.fake_pynvml"), "gpu-node-1")

    for _ in range(5):
        assert len(first.poll(NOW).gpus) == 1
        assert len(second.poll(NOW).gpus) == 1

    assert fake_pynvml.init_calls() == 1


def test_nvml_shut_down_underneath_is_initialised_again(nvml: ModuleType) -> None:
    fake_pynvml.add_gpu()
    source = NvmlSource(nvml, "gpu-node-1")
    source.poll(NOW)
    nvml.nvmlShutdown()  # another user of the library in this process

    with pytest.raises(SourceError, match="shut down"):
        source.poll(NOW)

    assert len(source.poll(NOW).gpus) == 1
    assert fake_pynvml.init_calls() == 2


def test_device_count_failure_is_a_source_error(nvml: ModuleType) -> None:
    fake_pynvml.add_gpu()
    fake_pynvml.set_count_error("Unknown")
    source = NvmlSource(nvml, "gpu-node-1")

    with pytest.raises(SourceError) as failure:
        source.poll(NOW)
    assert failure.value.message == "NVML: cannot count the GPUs on this node: Unknown Error"

    fake_pynvml.set_count_error(None)
    assert len(source.poll(NOW).gpus) == 1
    assert fake_pynvml.init_calls() == 1


# --- module choice -------------------------------------------------------------------------
def test_simulated_flag_is_on_the_poll_and_every_record(nvml: ModuleType) -> None:
    fake_pynvml.add_gpu()
    fake_pynvml.add_gpu()

    simulated, real = poll(nvml, simulated=True), poll(nvml)

    assert simulated.simulated and all(g.simulated for g in simulated.gpus)
    assert not real.simulated and not any(g.simulated for g in real.gpus)


def test_module_that_cannot_be_imported_is_a_source_error() -> None:
    with pytest.raises(SourceError, match="cannot import the NVML module 'no_such_pynvml'"):
        load_nvml_module("no_such_pynvml")


def test_module_that_is_not_pynvml_is_a_source_error() -> None:
    with pytest.raises(SourceError, match="'json' is not pynvml-compatible"):
        load_nvml_module("json")


def write_spec(path: Path, *gpus: dict[str, object]) -> Path:
    path.write_text(json.dumps({"gpus": list(gpus), "driver_version": "535.161.08"}))
    return path


def test_fake_gpus_from_the_spec_file(
    nvml: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = write_spec(
        tmp_path / "gpus.json",
        {"uuid": "GPU-spec-0", "util": 12, "processes": [[901, 1024], [902, None]]},
        {"uuid": "GPU-spec-1", "unsupported": ["power"], "errors": {"temperature": "Unknown"}},
    )
    monkeypatch.setenv("FAKE_NVML_SPEC", str(spec))

    result = poll(nvml)

    assert result.driver_version == "535.161.08"
    first, second = result.gpus
    assert (first.uuid, first.utilization_gpu) == ("GPU-spec-0", 12.0)
    assert first.processes == (GpuProcessRecord(901, 1024), GpuProcessRecord(902, None))
    assert (second.uuid, second.power_w, second.temperature_c) == ("GPU-spec-1", None, None)
    assert result.problems == ("GPU 1 temperature: Unknown Error",)


def test_a_broken_spec_file_is_a_source_error(
    nvml: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NVML_SPEC", str(write_spec(tmp_path / "bad.json", {"gpu": 1})))

    with pytest.raises(SourceError, match=r"tests\.fake_pynvml could not start"):
        poll(nvml)


def test_agent_processes_each_see_their_own_spec_gpus(tmp_path: Path) -> None:
    code = (
        "from datetime import datetime, UTC\n"
        "from collectors.nvml import NvmlSource, load_nvml_module\n"
        "source = NvmlSource(load_nvml_module('tests.fake_pynvml'), 'agent')\n"
        "print(' '.join(g.uuid for g in source.poll(datetime.now(UTC)).gpus))\n"
    )
    seen = []
    for agent in ("a", "b"):
        gpus = [{"uuid": f"GPU-{agent}{index}"} for index in range(2)]
        spec = write_spec(tmp_path / f"{agent}.json", *gpus)
        env = {**os.environ, "FAKE_NVML_SPEC": str(spec)}
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
            timeout=120, check=True,
        )  # fmt: skip
        seen.append(done.stdout.split())

    assert seen == [["GPU-a0", "GPU-a1"], ["GPU-b0", "GPU-b1"]]


# --- the simulated module ------------------------------------------------------------------
def test_simulated_gpus_are_plausible_and_stable(simnvml: ModuleType) -> None:
    source = NvmlSource(simnvml, "demo", simulated=True)
    with time_machine.travel(NOW, tick=False):
        first = source.poll(NOW)
    with time_machine.travel(NOW + timedelta(minutes=2), tick=False):
        later = source.poll(NOW)

    for result in (first, later):
        assert result.simulated and result.problems == ()
        assert [g.gpu_index for g in result.gpus] == [0, 1, 2]
        for gpu in result.gpus:
            assert gpu.simulated and gpu.name == "Simulated A100 80GB"
            assert gpu.utilization_gpu is not None and 0 <= gpu.utilization_gpu <= 100
            assert gpu.memory_used_bytes is not None and gpu.memory_total_bytes is not None
            assert 0 < gpu.memory_used_bytes <= gpu.memory_total_bytes
            assert gpu.power_w is not None and gpu.power_limit_w is not None
            assert 0 < gpu.power_w <= gpu.power_limit_w
            assert gpu.temperature_c is not None and 20 < gpu.temperature_c < 90
            assert gpu.processes == ()
        idle = result.gpus[2]
        assert (idle.utilization_gpu, idle.throttle_reasons) == (0.0, ("gpu_idle",))
        assert all(g.utilization_gpu for g in result.gpus[:2])
    uuids = [g.uuid for g in first.gpus]
    assert len(set(uuids)) == 3 and all(u.startswith("GPU-sim-") for u in uuids)
    assert [g.uuid for g in later.gpus] == uuids
    busy = zip(first.gpus[:2], later.gpus[:2], strict=True)
    assert any(a.utilization_gpu != b.utilization_gpu for a, b in busy)


def test_simulated_gpu_count_comes_from_the_environment(
    simnvml: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAYWATCH_SIM_GPUS", "many")
    with pytest.raises(SourceError, match="RAYWATCH_SIM_GPUS must be a whole number"):
        NvmlSource(simnvml, "demo").poll(NOW)

    monkeypatch.setenv("RAYWATCH_SIM_GPUS", "8")
    assert len(NvmlSource(simnvml, "demo").poll(NOW).gpus) == 8
