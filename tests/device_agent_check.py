"""The node agent's real NVML path on a machine with NVIDIA GPUs (run by hand; not
collected by pytest).

    python -m tests.device_agent_check OUT_DIR

Runs what `python -m collectors.agent` runs each second, Agent.collect() on the real
nvidia-ml-py, while a child holds GPU memory through libcuda (tests/device_nvml_check.py);
sends each batch through the wire format's JSON and decodes it as raywatch's report
endpoint does (collectors.agent.wire), and compares with `nvidia-smi`. Prints one verdict
line per check and the agent's own cost (CPU % of a core and RSS over 30 one-second
polls, bytes per poll); writes OUT_DIR/agent_check.json; exits 1 if any check fails.
Needs only what the agent installs on a node (psutil, nvidia-ml-py): no Django.
"""

from __future__ import annotations

import json
import multiprocessing
import resource
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from collectors.agent import wire
from collectors.agent.config import AgentConfig
from collectors.agent.main import Agent
from collectors.procstat import ProcessWatcher
from tests.device_nvml_check import hold_gpu_memory, smi

POLLS = 30


def main(out_dir: str) -> int:
    config = AgentConfig.from_env({"RAYWATCH_URL": "https://raywatch.invalid",
                                   "RAYWATCH_AGENT_TOKEN": "rwa_" + "0" * 43,
                                   "RAYWATCH_NVML_MODULE": "pynvml",
                                   "RAYWATCH_AGENT_SPOOL": str(Path(out_dir) / "spool")})
    agent = Agent(config, spool=None)  # type: ignore[arg-type]  # collect() only
    source, watcher = agent._gpu_source(), ProcessWatcher()
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=hold_gpu_memory, args=(ready, release))
    holder.start()
    if not ready.wait(60):
        print("FAIL the CUDA holder did not allocate its memory")
        return 1
    time.sleep(1)
    sizes, decoded = [], None
    cpu0, wall0 = time.process_time(), time.monotonic()
    for _ in range(POLLS):
        due = time.monotonic() + 1.0
        records = agent.collect(source, watcher)
        raw = json.dumps(records).encode()
        sizes.append(len(raw))
        decoded = json.loads(raw)
        time.sleep(max(0.0, due - time.monotonic()))
    cpu_percent = 100 * (time.process_time() - cpu0) / (time.monotonic() - wall0)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    table = smi()
    release.set()
    holder.join(30)

    gpu_record = next(r for r in decoded if r["kind"] == wire.GPU_POLL)
    poll, error = wire.decode_gpu_poll(gpu_record, node="device")
    by_uuid = {g.uuid: g for g in poll.gpus}
    held = [(g.uuid, p) for g in poll.gpus for p in g.processes or () if p.pid == holder.pid]
    facts = next(r for r in decoded if r["kind"] == wire.PROCESSES)["processes"]
    fact = next((f for f in facts if f.get("pid") == holder.pid), None)
    results = [
        ("the poll decodes as raywatch's endpoint decodes it, without error",
         error is None and len(poll.gpus) > 0, f"{len(poll.gpus)} GPUs, error {error}"),
        ("every GPU nvidia-smi lists is reported with its total memory",
         all(row["uuid"] in by_uuid and abs(by_uuid[row["uuid"]].memory_total_bytes
                                             - int(row["memory.total [MiB]"]) * 2**20) < 2**20
             for row in table), f"smi {[r['uuid'] for r in table]}"),
        ("the CUDA holder is listed on its GPU with the memory it holds",
         len(held) == 1 and (held[0][1].used_memory_bytes or 0) >= 512 * 2**20,
         f"{[(u, p.used_memory_bytes) for u, p in held]}"),
        ("the holder's process facts (state, RSS, threads) are reported",
         fact is not None and fact.get("state") and (fact.get("rss_bytes") or 0) > 0,
         json.dumps(fact)[:200]),
    ]
    report = {"cpu_percent_of_a_core": round(cpu_percent, 2), "max_rss_mb": round(rss_mb, 1),
              "bytes_per_poll": sorted(sizes)[len(sizes) // 2], "gpus": len(poll.gpus),
              "nvidia_smi": table, "last_batch": decoded,
              "at": datetime.now(UTC).isoformat(),
              "checks": [{"check": c, "ok": bool(ok), "detail": d} for c, ok, d in results]}
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    Path(out_dir, "agent_check.json").write_text(json.dumps(report, indent=2, default=str))
    for check, ok, detail in results:
        print(f"{'ok  ' if ok else 'FAIL'} {check}  {detail}")
    print(f"agent cost over {POLLS} one-second polls of {len(poll.gpus)} GPU(s): "
          f"{cpu_percent:.2f} % of a core, max RSS {rss_mb:.1f} MB, "
          f"{report['bytes_per_poll']} bytes a poll")
    return 0 if all(ok for _, ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
