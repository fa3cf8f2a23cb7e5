"""Cost of one NVML poll per GPU: NvmlSource.poll beside the bare pynvml calls it makes.

The fake pynvml (tests/fake_pynvml.py) stands in for the driver, with 8 GPUs of 2
processes each, so both rows measure Python only; their gap is what the source's own
wrapping costs (Query, the field table, unit conversion, records). A real driver adds
the same NVML time to both rows, which this cannot show. The two paths alternate poll
by poll so that drift of a shared machine falls on both. Prints figures; the exit status
says only whether the benchmark itself worked.

    .venv/bin/python bench/nvml_poll_bench.py      # BENCH_POLLS=2000 by default
    .venv/bin/python bench/nvml_poll_bench.py --smoke  # 50 polls: does it still run?

BENCH_NVML_MODULE=pynvml runs the same comparison on the real driver of a GPU machine
(its GPUs and whatever processes they have), where the NVML calls themselves are timed.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from types import ModuleType

import harness

from collectors.nvml import NvmlSource, load_nvml_module, shutdown_nvml
from tests import fake_pynvml

GPUS, PROCESSES_PER_GPU = 8, 2
POLLS = int(os.environ.get("BENCH_POLLS", harness.sized("2000", "50")))
MODULE = os.environ.get("BENCH_NVML_MODULE", "tests.fake_pynvml")
WARMUP = harness.sized(200, 10)
CALLS_PER_GPU = 16  # handle, UUID, name, 11 field calls, compute and graphics processes


def add_gpus() -> None:
    fake_pynvml.reset()
    for index in range(GPUS):
        fake_pynvml.add_gpu(
            uuid=f"GPU-bench-{index}", util=10 * index, mem_util=5 * index,
            mem_used=(index + 1) * 2**30, temp=40 + index, power_mw=100_000 + index * 25_000,
            throttle_mask=0x4 if index % 2 else 0, ecc_corrected=index,
            processes=[(10_000 + 10 * index + p, 2**30) for p in range(PROCESSES_PER_GPU)],
        )  # fmt: skip


def raw_poll(nvml: ModuleType) -> None:
    """The calls NvmlSource.poll makes, with no error handling, conversion or records."""
    count = nvml.nvmlDeviceGetCount()
    nvml.nvmlSystemGetDriverVersion()
    for index in range(count):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        nvml.nvmlDeviceGetUUID(handle)
        nvml.nvmlDeviceGetName(handle)
        nvml.nvmlDeviceGetUtilizationRates(handle)
        nvml.nvmlDeviceGetMemoryInfo(handle)
        nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
        nvml.nvmlDeviceGetPowerUsage(handle)
        nvml.nvmlDeviceGetEnforcedPowerLimit(handle)
        nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)
        nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)
        nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
        for error_type in (
            nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        ):
            nvml.nvmlDeviceGetTotalEccErrors(handle, error_type, nvml.NVML_VOLATILE_ECC)
        nvml.nvmlDeviceGetMigMode(handle)
        nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        nvml.nvmlDeviceGetGraphicsRunningProcesses(handle)


def timed_us_per_gpu(poll: Callable[[], object], gpus: int) -> float:
    start = time.perf_counter_ns()
    poll()
    return (time.perf_counter_ns() - start) / 1000 / gpus


def measure(nvml: ModuleType) -> tuple[int, dict[str, list[float]]]:
    """GPUs polled, and microseconds per GPU of each path, poll by poll."""
    source = NvmlSource(nvml, "bench-node")
    now = datetime.now(UTC)
    paths: dict[str, Callable[[], object]] = {
        f"raw {MODULE} calls": lambda: raw_poll(nvml),
        "NvmlSource.poll": lambda: source.poll(now),
    }
    first = source.poll(now)
    print(f"{len(first.gpus)} GPUs, driver {first.driver_version}, problems: {first.problems}")
    if not first.gpus:
        raise SystemExit("no GPU to poll")
    times: dict[str, list[float]] = {name: [] for name in paths}
    for round_ in range(WARMUP + POLLS):
        for name, poll in paths.items():
            elapsed = timed_us_per_gpu(poll, len(first.gpus))
            if round_ >= WARMUP:
                times[name].append(elapsed)
    return len(first.gpus), times


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median_us": statistics.median(values),
        "p95_us": statistics.quantiles(values, n=20)[18],
    }


def main() -> None:
    if MODULE == "tests.fake_pynvml":
        add_gpus()
    nvml = load_nvml_module(MODULE)
    try:
        gpus, times = measure(nvml)
    finally:
        shutdown_nvml(nvml)
    figures = {name: summary(values) for name, values in times.items()}
    raw, source = figures[f"raw {MODULE} calls"], figures["NvmlSource.poll"]
    rows = [
        [name, f["median_us"], f["p95_us"], f["median_us"] / raw["median_us"]]
        for name, f in figures.items()
    ]
    what = f"{PROCESSES_PER_GPU} processes each, " if MODULE == "tests.fake_pynvml" else ""
    harness.print_table(
        f"One poll of {gpus} GPUs through {MODULE} ({what}{CALLS_PER_GPU} NVML calls per GPU),"
        f" {POLLS:,} polls",
        ["path", "median us/GPU", "p95 us/GPU", "x raw"],
        rows,
    )
    overhead = source["median_us"] - raw["median_us"]
    print(f"\nthe source's own cost: {overhead:.1f} us per GPU per poll (median)")
    harness.print_json(
        {"module": MODULE, "gpus": gpus, "polls": POLLS, "raw": raw, "source": source,
         "overhead_us": overhead}
    )  # fmt: skip


if __name__ == "__main__":
    main()
