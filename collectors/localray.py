"""A local Ray cluster that belongs to one raywatch process (or one test run).

`make run` starts one when RAY_ADDRESS is unset. The cluster lives in a child
process that is the cluster's driver: ray.init() picks random ports (never
Redis's 6379), and the child shuts exactly its own cluster down on SIGTERM,
SIGINT or when its parent disappears. `ray stop` is never used: it would stop
every cluster on the machine.

    python -m collectors.localray --info-file PATH [--num-cpus N]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

# How long a stopping cluster waits for its workers to end before removing its scratch
# dir (inside LocalRay.stop's own wait).
WORKERS_END_S = 15.0


@dataclass(frozen=True)
class LocalCluster:
    dashboard_url: str
    gcs_address: str
    session_dir: str
    node_id: str


class LocalRay:
    """Handle on the child process that owns a local cluster."""

    def __init__(self, info_file: Path, num_cpus: int | None = None, num_gpus: int = 0,
                 temp_dir: Path | None = None, log_monitor: bool = True) -> None:
        self.info_file = info_file
        self.num_cpus = num_cpus
        self.num_gpus = num_gpus
        # Ray's log monitor sends the workers' output to their drivers' consoles (what a
        # person running `python train.py` against `make run`'s cluster reads); raywatch
        # reads no log through it. The test suite's clusters go without (0.4 CPU s a
        # minute idle, more while Tune's workers print).
        self.log_monitor = log_monitor
        # None: Ray's own (/tmp/ray), where `ray status` and the node agents look. A temp
        # dir of its own keeps a job submitted to this cluster from running its driver on
        # another cluster of the host (docs/ray-facts.md: "A job's driver and
        # ray_current_cluster"); keep it short, Ray's socket paths live in it.
        self.temp_dir = temp_dir
        self.process: subprocess.Popen[bytes] | None = None
        self.cluster: LocalCluster | None = None

    def start(self, timeout_s: float = 90.0, log_path: Path | None = None) -> LocalCluster:
        self.info_file.unlink(missing_ok=True)
        self.info_file.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "collectors.localray", "--info-file", str(self.info_file)]
        if self.num_cpus is not None:
            cmd += ["--num-cpus", str(self.num_cpus)]
        cmd += ["--num-gpus", str(self.num_gpus), "--parent-pid", str(os.getpid())]
        if self.temp_dir is not None:
            cmd += ["--temp-dir", str(self.temp_dir)]
        if not self.log_monitor:
            cmd += ["--no-log-monitor"]
        log = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
        # Its own session: a Ctrl-C in the terminal reaches raywatch, which then
        # stops the cluster in order, instead of tearing both down at once.
        # RAY_ADDRESS would make ray.init() join that cluster instead of starting ours.
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        self.process = subprocess.Popen(
            cmd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=str(Path(__file__).resolve().parent.parent),
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the local Ray cluster failed to start (exit {self.process.returncode})"
                    + (f"; see {log_path}" if log_path else "")
                )
            if self.info_file.exists():
                try:
                    self.cluster = LocalCluster(**json.loads(self.info_file.read_text()))
                    return self.cluster
                except (ValueError, TypeError):
                    pass  # half-written; read again
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the local Ray cluster did not start within {timeout_s:.0f} s")

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.info_file.unlink(missing_ok=True)


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free now. Each socket stays bound until all are picked: two
    free_port() calls in a row can get the same port, and Ray refuses to start when two of
    its components are given one ("trying to use a port number ... that is used by other
    components")."""
    with contextlib.ExitStack() as held:
        socks = [held.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def _serve(info_file: Path, num_cpus: int | None, num_gpus: int, parent_pid: int | None,
           temp_dir: Path | None = None, log_monitor: bool = True) -> None:
    agent_port, dashboard_port = free_ports(2)
    _ray_params_default("dashboard_agent_listen_port", agent_port)
    if not log_monitor:
        _ray_params_default("include_log_monitor", False)
    # This process is the cluster's first driver and never runs a task; Ray would start a
    # Python worker per CPU for it ("prestart_worker_first_driver"), which no other job can
    # use (workers belong to one job) and which then idle for the cluster's life: about a
    # CPU second each to start and 0.5 CPU s a minute each. Jobs still get theirs on demand.
    os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
    scratch = _scratch_of_its_own()
    try:
        _run_cluster(info_file, num_cpus, num_gpus, parent_pid, temp_dir, dashboard_port)
    finally:
        if scratch is not None:
            _wait_for_users(scratch)
            shutil.rmtree(scratch, ignore_errors=True)


def _wait_for_users(scratch: Path) -> None:
    """Wait (WORKERS_END_S at most) for the cluster's processes that still use `scratch`
    as their TMPDIR: its workers end once they see their raylet gone, a while after
    ray.shutdown() returns on a loaded machine, and by then no longer this process's
    descendants (Ray's SIGTERM handling may already have taken the raylet). A trial still
    in its step would otherwise fail on the removed dir, a FileNotFoundError in its
    error.txt, instead of ending with its cluster."""
    users = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            if process.environ().get("TMPDIR") == str(scratch):
                users.append(process)
    psutil.wait_procs(users, timeout=WORKERS_END_S)


def _scratch_of_its_own() -> Path | None:
    """A temporary dir for the cluster's processes (TMPDIR), removed when it stops: Ray's
    dashboard starts a multiprocessing forkserver whose pymp-* dir, made with Python's
    tempfile, nobody removes when the dashboard is stopped (one left in /tmp at every stop
    of `make run`). Ray's own dirs stay where they were: RAY_TMPDIR, which Ray reads
    before TMPDIR, is set to what Ray would have used (None: another Ray version, whose
    choice this cannot know; TMPDIR is left alone)."""
    try:
        from ray._common.utils import get_default_system_temp_dir
    except ImportError:
        return None
    os.environ.setdefault("RAY_TMPDIR", get_default_system_temp_dir())
    scratch = Path(tempfile.mkdtemp(prefix="rwray-"))  # short: a socket's path lives in it
    os.environ["TMPDIR"] = str(scratch)
    tempfile.tempdir = None  # this process's tempfile reads TMPDIR again
    return scratch


def _run_cluster(info_file: Path, num_cpus: int | None, num_gpus: int, parent_pid: int | None,
                 temp_dir: Path | None, dashboard_port: int) -> None:
    import ray

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    ctx = ray.init(
        # "local": always a new cluster, even when /tmp/ray/ray_current_cluster
        # points at another one (ray.init() would silently join that).
        address="local",
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        include_dashboard=True,
        dashboard_host="127.0.0.1",
        dashboard_port=dashboard_port,
        log_to_driver=False,
        configure_logging=False,
        **({"_temp_dir": str(temp_dir)} if temp_dir is not None else {}),
    )
    info = {
        "dashboard_url": f"http://{ctx.dashboard_url}",
        "gcs_address": ctx.address_info["gcs_address"],
        "session_dir": ctx.address_info["session_dir"],
        "node_id": ctx.address_info["node_id"],
    }
    if temp_dir is not None:
        # What `ray start --head` writes and ray.init() does not: without it, a submitted
        # job's driver ("auto") joins whichever cluster of the host it finds first.
        (temp_dir / "ray_current_cluster").write_text(info["gcs_address"])
    tmp = info_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(info))
    tmp.replace(info_file)
    print(f"local Ray cluster up: dashboard {info['dashboard_url']}, GCS {info['gcs_address']}",
          flush=True)
    while not stop.wait(1.0):
        if parent_pid and not _alive(parent_pid):
            break
    ray.shutdown()
    info_file.unlink(missing_ok=True)


def _ray_params_default(name: str, value: object) -> None:
    """Set a default of Ray's RayParams, which ray.init() takes no argument for: this
    process exists only to run the cluster.

    - dashboard_agent_listen_port: a free port instead of Ray's fixed 52365. Otherwise a
      second cluster on the host (the user's own, or a test's) has no dashboard agent: job
      submission answers "No available agent" and /worker/traceback "Failed to get agent
      address" (docs/ray-facts.md).
    - include_log_monitor: False starts no log monitor (LocalRay's `log_monitor`).

    The defaults live in RayParams' signature; another Ray version without the name is
    left to Ray."""
    import inspect

    from ray._private.parameter import RayParams

    init = RayParams.__init__
    names = list(inspect.signature(init).parameters)
    defaults = list(init.__defaults__ or ())
    try:
        index = names.index(name) - (len(names) - len(defaults))
    except ValueError:
        return
    if 0 <= index < len(defaults):
        defaults[index] = value
        init.__defaults__ = tuple(defaults)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--info-file", type=Path, required=True)
    parser.add_argument("--num-cpus", type=int, default=None)
    parser.add_argument("--num-gpus", type=int, default=0)
    parser.add_argument("--parent-pid", type=int, default=None)
    parser.add_argument("--temp-dir", type=Path, default=None)
    parser.add_argument("--no-log-monitor", action="store_true")
    args = parser.parse_args()
    _serve(args.info_file, args.num_cpus, args.num_gpus, args.parent_pid, args.temp_dir,
           log_monitor=not args.no_log_monitor)


if __name__ == "__main__":
    main()
