"""The node agent's real NVML path on a machine with NVIDIA GPUs (run by hand; not
collected by pytest).

    python -m tests.device_agent_check OUT_DIR

First, what `python -m collectors.agent` runs each second, Agent.collect() on the real
nvidia-ml-py, while a child holds GPU memory through libcuda (tests/device_nvml_check.py);
sends each batch through the wire format's JSON and decodes it as raywatch's report
endpoint does (collectors.agent.wire), and compares with `nvidia-smi`. Then the agent
itself, `python -m collectors.agent` with a node's environment, reporting to a stand-in of
raywatch's agent API: it must list a new CUDA holder, take its stack (py-spy), refuse a
signal for a process it does not watch, SIGTERM the holder on a signed command, report
the GPU freed, refuse the command's replay, and stop cleanly on SIGTERM.

Prints one verdict line per check and the agent's own cost (CPU % of a core and RSS over
30 one-second polls, bytes per poll); writes OUT_DIR/agent_check.json and the agent
process's log; exits 1 if any check fails. Needs only what the agent installs on a node
(requirements/agent.lock: psutil, nvidia-ml-py, py-spy): no Django.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil

from collectors.agent import wire
from collectors.agent.config import AgentConfig
from collectors.agent.main import Agent
from collectors.agent.spool import SUFFIX
from collectors.procstat import ProcessWatcher
from tests.device_nvml_check import hold_gpu_memory, smi
from tests.receivers import AgentApiStandIn, signed_command

POLLS = 30
NVML = {"RAYWATCH_NVML_MODULE": "pynvml"}  # the agent process's NVML: the real one


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
    sizes, decoded, facts = [], None, []
    cpu0, wall0 = time.process_time(), time.monotonic()
    for _ in range(POLLS):
        due = time.monotonic() + 1.0
        records = agent.collect(source, watcher)
        raw = json.dumps(records).encode()
        sizes.append(len(raw))
        decoded = json.loads(raw)
        # A snapshot of processes comes every RAYWATCH_AGENT_PROCESSES_S: the latest one.
        facts = next((r["processes"] for r in decoded if r["kind"] == wire.PROCESSES), facts)
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
    fact = next((f for f in facts if f.get("pid") == holder.pid), None)
    results = [
        ("the poll decodes as raywatch's endpoint decodes it, without error",
         error is None and len(poll.gpus) > 0, f"{len(poll.gpus)} GPUs, error {error}"),
        ("every GPU nvidia-smi lists is reported with its total memory",
         all(row["uuid"] in by_uuid and abs(by_uuid[row["uuid"]].memory_total_bytes
                                             - int(row["memory.total"]) * 2**20) < 2**20
             for row in table), f"smi {[r['uuid'] for r in table]}"),
        ("the CUDA holder is listed on its GPU with the memory it holds",
         len(held) == 1 and (held[0][1].used_memory_bytes or 0) >= 512 * 2**20,
         f"{[(u, p.used_memory_bytes) for u, p in held]}"),
        ("the holder's process facts (state, RSS, threads) are reported",
         fact is not None and fact.get("state") and (fact.get("rss_bytes") or 0) > 0,
         json.dumps(fact)[:200]),
    ]
    process_results, process_summary = agent_process_checks(Path(out_dir))
    results += process_results
    report = {"agent_process": process_summary,
              "cpu_percent_of_a_core": round(cpu_percent, 2), "max_rss_mb": round(rss_mb, 1),
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


# --- the agent as a node runs it: `python -m collectors.agent`, its reports and commands ---
NODE = "device"


def gpu_pids(stand_in: AgentApiStandIn, since: int = 0) -> list[set[int] | None]:
    """For each GPU poll reported after the first `since`: the pids NVML listed on any GPU
    (None: a GPU's process list could not be read, so who holds it is unknown)."""
    polls = [wire.decode_gpu_poll(r, node=NODE)[0] for r in stand_in.records(wire.GPU_POLL)]
    return [None if any(g.processes is None for g in poll.gpus)
            else {p.pid for g in poll.gpus for p in g.processes or ()}
            for poll in polls[since:] if poll is not None]


def latest_fact(stand_in: AgentApiStandIn, pid: int) -> dict | None:
    return next((f for r in reversed(stand_in.records(wire.PROCESSES))
                 for f in r["processes"] if f.get("pid") == pid), None)


def outcome(stand_in: AgentApiStandIn, pk: int, timeout_s: float = 30) -> dict:
    try:
        return stand_in.result(pk, timeout_s)
    except TimeoutError as exc:
        return {"outcome": "none", "detail": str(exc)}


def agent_process_checks(out_dir: Path) -> tuple[list[tuple[str, bool, str]], dict]:
    """`python -m collectors.agent` with only a node's environment, reporting to the
    stand-in, while a CUDA holder runs; then a stack, a refused signal, SIGTERM to the
    holder, a replay of that command, and SIGTERM to the agent."""
    token = "rwa_" + secrets.token_urlsafe(32)
    key, stand_in, home = wire.command_key(token), AgentApiStandIn(NODE), out_dir / "node-home"
    home.mkdir(parents=True, exist_ok=True)
    # A spool of its own each run: the command ids it remembers would refuse a rerun's.
    spool = Path(tempfile.mkdtemp(prefix="agent-check-spool-"))
    victim = subprocess.Popen(["sleep", "600"])  # a process of this node the agent does not watch
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=hold_gpu_memory, args=(ready, release))
    holder.start()
    ready.wait(60)
    py_spy = Path(sys.executable).parent / "py-spy"
    site_spy = next((Path(p) / "bin" / "py-spy" for p in sys.path
                     if (Path(p) / "bin" / "py-spy").exists()), None)
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "PYTHONPATH": os.pathsep.join(sys.path),
           "RAYWATCH_URL": stand_in.url, "RAYWATCH_AGENT_TOKEN": token, **NVML,
           "RAYWATCH_AGENT_SPOOL": str(spool),
           "RAYWATCH_RAY_TMP_DIR": str(home / "ray-tmp"), "RAYWATCH_AGENT_PROCESSES_S": "1",
           "RAYWATCH_PY_SPY": str(py_spy if py_spy.exists() else site_spy or "py-spy")}
    with (out_dir / "agent_process.log").open("w") as log_file:
        agent = subprocess.Popen([sys.executable, "-m", "collectors.agent"], env=env,
                                 stdout=log_file, stderr=subprocess.STDOUT)
    t0 = time.monotonic()
    try:
        on_gpu = stand_in.wait(lambda: any(holder.pid in (pids or ()) for pids in
                                           gpu_pids(stand_in)), 30)
        seen_s = time.monotonic() - t0
        fact = stand_in.wait(lambda: latest_fact(stand_in, holder.pid), 15) or {}
        started = fact.get("create_time")
        stand_in.send(signed_command(key, 1, wire.STACK, NODE,
                                     {"pid": holder.pid, "create_time": started}))
        stack = outcome(stand_in, 1, 40)
        stand_in.send(signed_command(key, 2, wire.SIGNAL, NODE, {
            "pid": victim.pid, "create_time": psutil.Process(victim.pid).create_time(),
            "signal": "SIGTERM"}))
        refused = outcome(stand_in, 2)
        victim_alive = victim.poll() is None
        polls_before = len(gpu_pids(stand_in))
        term = signed_command(key, 3, wire.SIGNAL, NODE, {
            "pid": holder.pid, "create_time": started, "signal": "SIGTERM"}, ttl_s=120)
        stand_in.send(term)
        signalled = outcome(stand_in, 3)
        holder.join(20)
        freed = stand_in.wait(lambda: any(pids is not None and holder.pid not in pids
                                          for pids in gpu_pids(stand_in, polls_before)), 20)
        stand_in.forget(3)
        stand_in.send(term)  # the same command again: a replay
        replay = outcome(stand_in, 3)
        agent.send_signal(signal.SIGTERM)
        t_stop = time.monotonic()
        try:
            code: int | None = agent.wait(30)
        except subprocess.TimeoutExpired:
            code = None  # still running: the check fails, and it is killed below
        stop_s = time.monotonic() - t_stop
        spooled = list(spool.glob(f"**/*{SUFFIX}"))
    finally:
        if agent.poll() is None:
            agent.kill()
        victim.kill()
        victim.wait()
        shutil.rmtree(spool, ignore_errors=True)
        release.set()
        holder.join(10)
        if holder.is_alive():
            holder.kill()
        stand_in.stop()
    results = [
        ("the agent process reports the CUDA holder on its GPU",
         bool(on_gpu), f"first seen {seen_s:.1f} s after the agent started"),
        ("the holder's process facts carry its start time", started is not None,
         json.dumps(fact)[:200]),
        ("a stack of the holder is taken (py-spy) and returned as the command's result",
         stack["outcome"] == "taken" and hold_gpu_memory.__name__ in stack["detail"],
         f"{stack['outcome']}: {stack['detail'][:300]}"),
        ("a signal for a process the agent does not watch is refused; it lives on",
         refused["outcome"] == "refused" and victim_alive,
         f"{refused['outcome']}: {refused['detail']}"),
        ("SIGTERM for the holder is sent; the holder ends",
         signalled["outcome"] == "signalled" and holder.exitcode == -signal.SIGTERM,
         f"{signalled['outcome']}: {signalled['detail']}; exit code {holder.exitcode}"),
        ("a later GPU poll no longer lists the holder (its memory is freed)", bool(freed), ""),
        ("the same command again is refused as a replay",
         replay["outcome"] == "refused" and "replay" in replay["detail"],
         f"{replay['outcome']}: {replay['detail']}"),
        ("SIGTERM stops the agent cleanly", code == 0,
         f"exit {code} after {stop_s:.1f} s, {len(spooled)} batches spooled for its restart"),
    ]
    summary = {"reports": len(stand_in.reports), "gpu_polls": len(gpu_pids(stand_in)),
               "results": stand_in.results, "holder_seen_s": round(seen_s, 2)}
    return results, summary


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
