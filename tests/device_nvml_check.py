"""The real NVML path on a machine with NVIDIA GPUs (run by hand; not collected by pytest).

    python -m tests.device_nvml_check OUT_DIR

Polls every GPU through collectors.nvml.NvmlSource with the real nvidia-ml-py, holds
GPU memory from a child process through the CUDA driver API (libcuda, no toolkit
needed), polls again, and compares what raywatch read with `nvidia-smi`. Writes
OUT_DIR/nvml_check.json and prints one verdict line per check; exits 1 if any fails.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import multiprocessing
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collectors.nvml import NvmlSource, load_nvml_module

HOLD_BYTES = 512 * 1024**2
# A kernel that spins n times and stores its count (so the loop cannot be optimised away).
SPIN_PTX = b"""
.version 7.0
.target sm_50
.address_size 64
.visible .entry spin(.param .u64 out, .param .u64 n) {
  .reg .u64 %r<5>; .reg .pred %p;
  ld.param.u64 %r1, [n];
  ld.param.u64 %r3, [out];
  mov.u64 %r2, 0;
LOOP:
  add.u64 %r2, %r2, 1;
  setp.lt.u64 %p, %r2, %r1;
  @%p bra LOOP;
  st.global.u64 [%r3], %r2;
  ret;
}
\0"""


def hold_gpu_memory(ready: Any, release: Any, busy: Any = None) -> None:
    """A plain process that allocates HOLD_BYTES on GPU 0 and keeps it until told;
    while `busy` is set it keeps the GPU's SMs spinning."""
    cuda = ctypes.CDLL("libcuda.so.1")
    device, context, pointer = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    for call, args in (("cuInit", (0,)), ("cuDeviceGet", (ctypes.byref(device), 0)),
                       ("cuCtxCreate_v2", (ctypes.byref(context), 0, device)),
                       ("cuMemAlloc_v2", (ctypes.byref(pointer), ctypes.c_size_t(HOLD_BYTES)))):
        code = getattr(cuda, call)(*args)
        if code != 0:
            raise SystemExit(f"{call} failed with CUDA error {code}")
    ready.set()
    module, kernel = ctypes.c_void_p(), ctypes.c_void_p()
    cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(SPIN_PTX))
    cuda.cuModuleGetFunction(ctypes.byref(kernel), module, b"spin")
    out, n = ctypes.c_uint64(pointer.value), ctypes.c_uint64(20_000_000)
    args = (ctypes.c_void_p * 2)(ctypes.addressof(out), ctypes.addressof(n))
    while not release.is_set():
        if busy is not None and busy.is_set():
            cuda.cuLaunchKernel(kernel, 264, 1, 1, 128, 1, 1, 0, None, args, None)
            cuda.cuCtxSynchronize()
        else:
            time.sleep(0.05)


def smi() -> list[dict[str, str]]:
    fields = "index,uuid,name,memory.total,memory.used,utilization.gpu,temperature.gpu,power.draw"
    out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    names = fields.split(",")
    return [dict(zip(names, (v.strip() for v in line.split(",")), strict=True))
            for line in out.strip().splitlines()]


def as_json(poll: Any) -> dict[str, Any]:
    return json.loads(json.dumps(dataclasses.asdict(poll), default=str))


def checks(before: dict[str, Any], during: dict[str, Any], table: list[dict[str, str]],
           holder_pid: int) -> list[tuple[str, bool, str]]:
    gpus = during["gpus"]
    by_uuid = {row["uuid"]: row for row in table}
    held = [p for p in gpus[0]["processes"] or [] if p["pid"] == holder_pid]
    results = [
        ("every GPU read", len(gpus) == len(table),
         f"{len(gpus)} read, nvidia-smi lists {len(table)}"),
        ("UUIDs match nvidia-smi", all(g["uuid"] in by_uuid for g in gpus), ""),
        ("no problems reported", not during["problems"], "; ".join(during["problems"])),
        ("the holder process is listed on GPU 0", bool(held), f"pid {holder_pid}"),
        ("its memory is at least what it allocated",
         bool(held) and (held[0]["used_memory_bytes"] or 0) >= HOLD_BYTES,
         f"{held[0]['used_memory_bytes'] if held else None} bytes"),
        ("memory used grew by the allocation",
         gpus[0]["memory_used_bytes"] - before["gpus"][0]["memory_used_bytes"] >= HOLD_BYTES,
         f"{before['gpus'][0]['memory_used_bytes']} -> {gpus[0]['memory_used_bytes']}"),
    ]
    for gpu in gpus:
        row = by_uuid.get(gpu["uuid"], {})
        total_mib = (gpu["memory_total_bytes"] or 0) // 1024**2
        results.append((f"GPU {gpu['gpu_index']} total memory matches (MiB)",
                        abs(total_mib - int(row.get("memory.total", -1))) <= 1,
                        f"raywatch {total_mib}, nvidia-smi {row.get('memory.total')}"))
        missing = [k for k in ("name", "utilization_gpu", "temperature_c", "power_w",
                               "power_limit_w", "sm_clock_mhz", "throttle_reasons")
                   if gpu[k] is None]
        results.append((f"GPU {gpu['gpu_index']} core fields present", not missing,
                        f"missing: {missing}" if missing else gpu["name"]))
    return results


def main(out_dir: str) -> int:
    source = NvmlSource(load_nvml_module("pynvml"), node="device")
    started = time.perf_counter()
    before = as_json(source.poll(datetime.now(UTC)))
    first_ms = (time.perf_counter() - started) * 1000
    ctx = multiprocessing.get_context("spawn")
    ready, release, busy = ctx.Event(), ctx.Event(), ctx.Event()
    holder = ctx.Process(target=hold_gpu_memory, args=(ready, release, busy))
    holder.start()
    if not ready.wait(60):
        print("FAIL the CUDA holder did not allocate its memory")
        return 1
    time.sleep(1)
    timings = []
    for _ in range(20):
        t0 = time.perf_counter()
        during = as_json(source.poll(datetime.now(UTC)))
        timings.append((time.perf_counter() - t0) * 1000)
    table = smi()
    busy.set()
    time.sleep(3)
    loaded = as_json(source.poll(datetime.now(UTC)))
    busy.clear()
    time.sleep(3)
    idle = as_json(source.poll(datetime.now(UTC)))
    release.set()
    holder.join(30)
    results = checks(before, during, table, holder.pid or 0)
    util = [p["gpus"][0]["utilization_gpu"] for p in (loaded, idle)]
    results.append(("utilization follows load (busy >= 90 %, then idle <= 10 %)",
                    util[0] is not None and util[0] >= 90 and util[1] is not None
                    and util[1] <= 10, f"busy {util[0]} %, idle {util[1]} %"))
    report = {"first_poll_ms": round(first_ms, 1), "poll_ms": sorted(timings),
              "before": before, "during": during, "loaded": loaded, "idle": idle,
              "nvidia_smi": table,
              "checks": [{"check": c, "ok": ok, "detail": d} for c, ok, d in results]}
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    Path(out_dir, "nvml_check.json").write_text(json.dumps(report, indent=2))
    for check, ok, detail in results:
        print(f"{'ok  ' if ok else 'FAIL'} {check}  {detail}")
    print(f"first poll {first_ms:.1f} ms; poll of {len(table)} GPUs median "
          f"{sorted(timings)[len(timings) // 2]:.2f} ms")
    return 0 if all(ok for _, ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
