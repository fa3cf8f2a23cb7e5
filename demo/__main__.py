"""`make demo`: raywatch on a laptop, with no GPU and no Ray knowledge needed.

Starts a local Ray cluster that is told it has four GPUs (Ray accepts num_gpus=N without
the hardware), raywatch on the embedded default (SQLite, in-memory channel layer,
in-process scheduler) watching it, with simulated GPUs that follow the cluster's
workers (collectors/simworkload.py), then a Tune search that goes wrong in the ways
raywatch catches (demo/workload.py), two GRPO runs as EasyR1 and verl ship them (console
only, nothing configured: demo/grpo.py), one whose reward call hangs at step 4 and one
whose reward, computed inside its trainer, hangs in its first step, a Ray Train run as
Ray ships it whose rank 1 stalls outside the collective (demo/train.py), and a forgotten
process holding GPU 3 (demo/leftover.py). Prints the
admin login. Ctrl-C stops everything it started, and nothing else: it never runs
`ray stop`.

    python -m demo      # what `make demo` runs, from the repository

Its data lives in .raywatch/demo/ (RAYWATCH_DEMO_DIR), started afresh each time.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from collectors.localray import LocalCluster, LocalRay

ROOT = Path(__file__).resolve().parent.parent
GPUS = 4
LEFTOVER_GPU = "3"
GRPO_HANG_AT = 4  # the step of the EasyR1-shaped run whose reward call never returns
VERL_HANG_AT = 1  # the step of the verl-shaped run whose reward (in its trainer) hangs
TRAIN_HANG_AT = 10  # the step at which the Ray Train run's rank 1 never gets its batch
TRAIN_RUN = "sft-demo"  # its name (RunConfig.name): raywatch lists it under it
PR_SET_PDEATHSIG = 1  # linux/prctl.h
# Shortened so that each failure shows within two minutes (the defaults suit real
# searches: docs/detectors.md); a value set in the environment wins.
THRESHOLDS = {
    "RAYWATCH_STALL_MIN_S": "45",  # above the hosted judge's 30 s wait: slow is not stalled
    "RAYWATCH_SLOW_FOR_S": "10",
    "RAYWATCH_IDLE_GPU_S": "10",
    "RAYWATCH_ORPHAN_GRACE_S": "10",
}
# The demo runs on its own embedded default and its own cluster, whatever the shell says.
NOT_INHERITED = ("DATABASE_URL", "REDIS_URL", "RAY_ADDRESS", "RAY_API_SERVER_ADDRESS",
                 "RAY_GCS_ADDRESS", "RAYWATCH_LOG_DIRS", "CUDA_VISIBLE_DEVICES")
# Left from the previous demo, removed at start; the secret key stays.
PREVIOUS_RUN = ("raywatch.sqlite3", "raywatch.sqlite3-wal", "raywatch.sqlite3-shm",
                "admin-password.txt", "ray_results", "workload.log", "leftover.log", "ray.log",
                "checkpoints", "grpo.log", "verl.log", "train.log", "train_storage")


def main() -> int:
    data = Path(os.environ.get("RAYWATCH_DEMO_DIR") or ROOT / ".raywatch" / "demo").resolve()
    fresh_start(data)
    for name in NOT_INHERITED:
        os.environ.pop(name, None)  # also from the Ray cluster's environment
    # A stalled trial's stack through Ray's dashboard too (docs/ray-facts.md), with the
    # py-spy that raywatch installed beside Python.
    os.environ.setdefault("RAY_DASHBOARD_ENABLE_PROFILING", "1")
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent),
                                          os.environ.get("PATH", "")])
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    ray = LocalRay(data / "local-ray.json", num_cpus=GPUS, num_gpus=GPUS)
    running: dict[str, subprocess.Popen[bytes]] = {}
    try:
        return run(data, ray, running)
    except KeyboardInterrupt:
        return 0
    finally:
        stop_all(ray, running)


def run(data: Path, ray: LocalRay, running: dict[str, subprocess.Popen[bytes]]) -> int:
    """Start it all, in order, into `running`; the demo's exit status once raywatch ends."""
    say(f"starting a local Ray cluster with {GPUS} GPUs (logical: no hardware needed)…")
    try:
        cluster = ray.start(log_path=data / "ray.log")
    except RuntimeError as exc:
        say(str(exc))
        return 1
    env = demo_env(data, cluster)
    steps = (("migrate", "--noinput", "-v", "0"), ("collectstatic", "--noinput", "-v", "0"),
             ("ensure_admin",))  # as `make run` does
    if not all(manage(env, *step) for step in steps):
        return 1
    serve = running["serve"] = subprocess.Popen(  # in the demo's process group: Ctrl-C reaches it
        [sys.executable, "manage.py", "serve"], cwd=ROOT, env=env,
        preexec_fn=_die_with_parent)  # noqa: PLW1509 (no threads here)
    url = f"http://{env.get('HOST', '127.0.0.1')}:{env.get('PORT', '8000')}/"
    if not answering(url, serve):
        return serve.returncode or 1
    on_gpu = {**env, "CUDA_VISIBLE_DEVICES": LEFTOVER_GPU}
    running["leftover"] = start(data / "leftover.log", on_gpu, "-m", "demo.leftover")
    running["workload"] = start(data / "workload.log", env, "demo/workload.py",
                                "--storage-path", str(data / "ray_results"))
    # Two GRPO runs beside the search, as their frameworks ship (their console only,
    # found from Ray): EasyR1's reward call hangs at step 4, verl's reward (inside its
    # TaskRunner) in its first step.
    running["grpo"] = start(data / "grpo.log", env, "-m", "demo.grpo", "easyr1",
                            cluster.gcs_address, "40", str(GRPO_HANG_AT))
    running["verl"] = start(data / "verl.log", env, "-m", "demo.grpo", "verl",
                            cluster.gcs_address, "40", str(VERL_HANG_AT))
    # A Ray Train run as Ray ships it (no state tracking, nothing added): read from Ray
    # Train's own log of each rank; its rank 1 stalls outside the collective.
    running["train"] = start(data / "train.log", env, "-m", "demo.train", cluster.gcs_address,
                             TRAIN_RUN, str(TRAIN_HANG_AT), str(data / "train_storage"))
    print(banner(url, data, running["leftover"].pid), flush=True)
    return serve.wait()


def stop_all(ray: LocalRay, running: dict[str, subprocess.Popen[bytes]]) -> None:
    """raywatch first, then the search and the leftover process, then the Ray cluster."""
    signal.signal(signal.SIGINT, _still_stopping)
    say("stopping the demo's search, its leftover process and its Ray cluster…")
    if "serve" in running:
        stop_serve(running.pop("serve"), told=signal.SIGINT in _RECEIVED)
    for process in reversed(running.values()):
        stop_session(process)
    ray.stop()
    say("stopped")


def say(text: str) -> None:
    print(f"demo: {text}", flush=True)


_RECEIVED: list[int] = []


def _interrupt(signum: int, frame: Any) -> None:
    _RECEIVED.append(signum)
    raise KeyboardInterrupt


def _still_stopping(signum: int, frame: Any) -> None:
    say("still stopping (it ends what it started first)…")


def _die_with_parent() -> None:
    """In a child before it runs (Linux): SIGTERM when the demo dies, even by SIGKILL,
    so nothing it started outlives it. Elsewhere Ctrl-C's cleanup is all there is."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def fresh_start(data: Path) -> None:
    data.mkdir(parents=True, exist_ok=True)
    for name in PREVIOUS_RUN:
        path = data / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def demo_env(data: Path, cluster: LocalCluster) -> dict[str, str]:
    """raywatch's and the search's environment: the demo's data, cluster and GPUs."""
    return {
        **THRESHOLDS, **os.environ,
        "RAYWATCH_DATA_DIR": str(data),
        "RAY_ADDRESS": cluster.gcs_address,
        "RAY_AUTH_MODE": "token",  # a driver joining a cluster with token auth (Ray 2.60)
        "RAYWATCH_GPU_SOURCE": "simulated",
        "RAYWATCH_SIM_GPUS": str(GPUS),
        "RAYWATCH_SIM_GCS": cluster.gcs_address,
        # The search's storage and its driver's live copy, fresher (docs/ray-facts.md).
        # The GRPO runs need none: their consoles are read from the cluster's temp dir.
        "RAYWATCH_LOG_DIRS": f"{data / 'ray_results'}:{Path(cluster.session_dir) / 'artifacts'}",
        "RAYWATCH_RAY_TMP_DIR": str(Path(cluster.session_dir).parent),
    }


def manage(env: dict[str, str], *args: str) -> bool:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env)
    if done.returncode:
        say(f"manage.py {args[0]} failed (exit {done.returncode})")
    return done.returncode == 0


def answering(url: str, serve: subprocess.Popen[bytes], timeout_s: float = 120) -> bool:
    """Wait for raywatch's page to answer; False if the server ended first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and serve.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}healthz", timeout=2):
                return True
        except OSError:
            time.sleep(0.5)
    return False


def start(log: Path, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    """A process of the demo in a session of its own: Ctrl-C reaches the demo, which
    then stops it in order."""
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True,
                                preexec_fn=_die_with_parent)  # noqa: PLW1509 (no threads here)


def stop_serve(serve: subprocess.Popen[bytes], told: bool) -> None:
    """raywatch shares the demo's process group: a Ctrl-C in the terminal reached it too
    (`told`); otherwise tell it. It lets a running action finish recording its steps
    (a terminate watches Tune for 20 s); tell it again, then force it, if it does not end."""
    for nudge in (not told, True):
        if nudge and serve.poll() is None:
            serve.send_signal(signal.SIGINT)
        try:
            serve.wait(60)
            return
        except subprocess.TimeoutExpired:
            pass
    serve.kill()
    serve.wait()


def stop_session(process: subprocess.Popen[bytes], grace_s: float = 10) -> None:
    """SIGTERM, then SIGKILL to its whole session if it is still there after `grace_s`."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def banner(url: str, data: Path, leftover_pid: int) -> str:
    return f"""
demo: raywatch is on {url}  (log in with the admin login printed above)
demo: a Ray Tune search runs on {GPUS} simulated GPUs: demo/workload.py, its output in
      {data / 'workload.log'}. Within two minutes the Alerts page shows:
        - a stalled trial: alive, idle, holding its GPU (Terminate on its trial page)
        - a step-time regression: its judge sits behind a rate limit, ~30 s a step
        - an idle GPU during a step
        - an errored trial: lr=20 diverged
        - an actor asking for 8 GPUs, which no node can ever give (infeasible)
        - GPU memory of an orphaned process, pid {leftover_pid} on GPU {LEFTOVER_GPU}
          (Kill on that GPU's page)
      and two GRPO runs as EasyR1 and verl ship them (demo/grpo.py; nothing configured,
      found from Ray, their consoles read):
        - EasyR1's reward call hangs at step {GRPO_HANG_AT}: call_overdue names
          AutoRewardManager.compute_reward; the Jobs page shows the calls running now
        - verl's reward, computed inside its TaskRunner, hangs in step {VERL_HANG_AT}: the
          run is stalled, hung in the frame its stacks show, within a minute
      and a Ray Train run as Ray ships it (demo/train.py; state tracking off):
        - at step {TRAIN_HANG_AT} its rank 1's loader never yields while rank 0 waits in
          all_reduce: the run is stalled, naming rank 1 and where each rank waits
      Ctrl-C stops the demo, its Ray cluster and its processes.
"""


if __name__ == "__main__":
    sys.exit(main())
