"""Whether this node runs a Ray head, and what raywatch needs to watch its cluster: the
head's agent announces it (docs/agent-protocol.md, "head"), and an admin approves it.

Read from the head's dashboard process (`ray/dashboard/dashboard.py`), whose arguments
carry its host and port, the GCS address, the session dir and the cluster id; only the
head whose Ray temp dir is this agent's (RAYWATCH_RAY_TMP_DIR) counts, so an agent never
announces another cluster started on the same host. KubeRay's name and namespace come
from the environment (RAY_CLUSTER_NAME is set by KubeRay in Ray's containers; a sidecar
gets them with RAYWATCH_KUBERAY_NAME / RAYWATCH_KUBERAY_NAMESPACE, or POD_NAMESPACE from
the downward API).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from collectors.procstat import command_lines

DASHBOARD = b"dashboard/dashboard.py"
EVERY_S = 30.0  # a head does not move: look again this often (a restart: a new session)
ANY_HOST = ("", "0.0.0.0", "::")


def head_facts(ray_tmp_dir: Path, env: Mapping[str, str] = os.environ,
               processes: Callable[[], Iterable[tuple[int, bytes]]] = command_lines
               ) -> dict[str, Any] | None:
    """The facts of the Ray head running on this node with this Ray temp dir, or None."""
    wanted = _resolved(ray_tmp_dir)
    for _, cmdline in processes():
        if DASHBOARD not in cmdline:
            continue
        args = _flags(cmdline.decode("utf-8", "replace").split("\0"))
        if args.get("temp-dir") and _resolved(Path(args["temp-dir"])) != wanted:
            continue
        host, port, node_ip = args.get("host", ""), args.get("port", ""), \
            args.get("node-ip-address", "")
        if not port.isdigit():
            continue
        reachable = node_ip if host in ANY_HOST else host
        return {
            "dashboard_url": f"http://{reachable}:{port}" if reachable else "",
            "dashboard_host": host,  # 127.0.0.1: reachable from this host only
            "gcs_address": args.get("gcs-address", ""),
            "session_name": Path(args.get("session-dir", "")).name,
            "cluster_id": args.get("cluster-id-hex", ""),
            "node_ip": node_ip,
            "kuberay": kuberay(env),
        }
    return None


def kuberay(env: Mapping[str, str]) -> dict[str, str]:
    name = env.get("RAYWATCH_KUBERAY_NAME") or env.get("RAY_CLUSTER_NAME") or ""
    namespace = (env.get("RAYWATCH_KUBERAY_NAMESPACE") or env.get("RAY_CLUSTER_NAMESPACE")
                 or env.get("POD_NAMESPACE") or "")
    return {"name": name, "namespace": namespace} if name else {}


class HeadWatch:
    """head_facts() at most every EVERY_S: the report carries the last answer."""

    def __init__(self, ray_tmp_dir: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.ray_tmp_dir, self.clock = ray_tmp_dir, clock
        self.facts: dict[str, Any] | None = None
        self.due = 0.0

    def current(self) -> dict[str, Any] | None:
        now = self.clock()
        if now >= self.due:
            self.due = now + EVERY_S
            try:
                self.facts = head_facts(self.ray_tmp_dir)
            except OSError:
                self.facts = None
        return self.facts


def _flags(argv: list[str]) -> dict[str, str]:
    flags = {}
    for arg in argv:
        if arg.startswith("--") and "=" in arg:
            key, _, value = arg[2:].partition("=")
            flags[key] = value
    return flags


def _resolved(path: Path) -> str:
    try:
        return str(path.expanduser().resolve())
    except OSError:
        return str(path)
