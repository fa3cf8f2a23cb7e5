"""The agent's settings, from its environment, read once at start; a bad value stops it
with a message that names the variable (like raywatch's own settings)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from collectors.rootfiles import JSON_FILE_MAX_MB, LOG_FILE_MAX_MB, Caps

GPU_SOURCES = ("nvml", "simulated", "off")
SIMULATED_MODULE = "collectors.simnvml"


class ConfigError(Exception):
    pass


@dataclass(frozen=True)
class AgentConfig:
    url: str  # raywatch's base URL, without a trailing slash
    token: str
    node_name: str | None  # must match the token's node when set
    node_ip: str | None
    spool_dir: Path
    spool_max_bytes: int
    poll_s: float
    gpu_source: str
    nvml_module: str
    log_dirs: tuple[Path, ...]  # Tune/TensorBoard roots besides the default ones
    timeout_s: float
    py_spy: str | None = None  # py-spy for stacks; None: beside this Python, else on PATH
    ray_tmp_dir: Path = Path("/tmp/ray")  # every Ray session's live driver_artifacts
    poll_logs_s: float = 1.0
    log_quiet_s: float = 60.0
    log_rescan_s: float = 300.0
    log_rescan_per_poll: int = 100  # quiet trial dirs the slow rescan checks a poll, at most
    log_file_max_mb: int = LOG_FILE_MAX_MB  # a larger log file is refused (rootfiles)
    log_json_file_max_mb: int = JSON_FILE_MAX_MB  # params.json, experiment_state: parsed whole
    processes_s: float = 5.0  # between process snapshots (every GPU poll after a signal)
    # Gather this long before a report (0: send what is spooled at once); None: as long
    # as raywatch's last answer asked (`send_s`: 0 on a small cluster). A report of five
    # polls costs raywatch about what one of one poll costs (bench/gpu_reports_bench.py):
    # large clusters send every few seconds; trial results then arrive that much later.
    send_s: float | None = None

    @property
    def api(self) -> str:
        return f"{self.url}/api/agent/v1/"

    @property
    def log_caps(self) -> Caps:
        return Caps.mb(self.log_file_max_mb, self.log_json_file_max_mb)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> AgentConfig:
        gpu_source = env.get("RAYWATCH_GPU_SOURCE", "nvml")
        if gpu_source not in GPU_SOURCES:
            raise ConfigError(f"RAYWATCH_GPU_SOURCE={gpu_source!r}: one of "
                              f"{', '.join(GPU_SOURCES)}")
        module = SIMULATED_MODULE if gpu_source == "simulated" else env.get(
            "RAYWATCH_NVML_MODULE", "pynvml")
        state = Path(env.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
        return cls(
            url=_url(env.get("RAYWATCH_URL", "")),
            token=_token(env),
            node_name=env.get("RAYWATCH_NODE_NAME") or None,
            node_ip=env.get("RAYWATCH_NODE_IP") or None,
            spool_dir=Path(env.get("RAYWATCH_AGENT_SPOOL") or state / "raywatch-agent"
                           ).expanduser(),
            spool_max_bytes=int(_number(env, "RAYWATCH_AGENT_SPOOL_MB", 256, 1) * 1024 * 1024),
            poll_s=_number(env, "RAYWATCH_POLL_GPU_S", 1.0, 0.2),
            gpu_source=gpu_source,
            nvml_module=module,
            log_dirs=log_dirs(env.get("RAYWATCH_LOG_DIRS", "")),
            ray_tmp_dir=Path(env.get("RAYWATCH_RAY_TMP_DIR") or "/tmp/ray").expanduser(),
            poll_logs_s=_number(env, "RAYWATCH_POLL_LOGS_S", 1.0, 0.2),
            log_quiet_s=_number(env, "RAYWATCH_LOG_QUIET_S", 60.0, 0),
            log_rescan_s=_number(env, "RAYWATCH_LOG_RESCAN_S", 300.0, 1),
            log_rescan_per_poll=_whole(env, "RAYWATCH_LOG_RESCAN_PER_POLL", 100, 1),
            log_file_max_mb=_whole(env, "RAYWATCH_LOG_FILE_MAX_MB", LOG_FILE_MAX_MB, 1),
            log_json_file_max_mb=_whole(env, "RAYWATCH_LOG_JSON_FILE_MAX_MB",
                                        JSON_FILE_MAX_MB, 1),
            timeout_s=_number(env, "RAYWATCH_AGENT_TIMEOUT_S", 10.0, 1),
            py_spy=env.get("RAYWATCH_PY_SPY") or None,
            processes_s=_number(env, "RAYWATCH_AGENT_PROCESSES_S", 5.0, 0.2),
            send_s=_number(env, "RAYWATCH_AGENT_SEND_S", 0.0, 0, maximum=MAX_SEND_S)
            if env.get("RAYWATCH_AGENT_SEND_S") else None,
        )


MAX_SEND_S = 60.0  # what an agent gathers reaches raywatch that much later


def log_dirs(value: str) -> tuple[Path, ...]:
    """RAYWATCH_LOG_DIRS: directories separated by os.pathsep (":") or commas."""
    parts = value.replace(",", os.pathsep).split(os.pathsep)
    return tuple(Path(p.strip()).expanduser() for p in parts if p.strip())


def _url(value: str) -> str:
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(f"RAYWATCH_URL={value!r}: raywatch's address, e.g. "
                          "https://raywatch.example.org")
    return value.rstrip("/")


def _token(env: Mapping[str, str]) -> str:
    token = env.get("RAYWATCH_AGENT_TOKEN", "")
    if not token and env.get("RAYWATCH_AGENT_TOKEN_FILE"):
        try:
            token = Path(env["RAYWATCH_AGENT_TOKEN_FILE"]).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"RAYWATCH_AGENT_TOKEN_FILE: {exc}") from None
    if not token.startswith("rwa_"):
        raise ConfigError("RAYWATCH_AGENT_TOKEN (or _FILE): the node token an admin issued "
                          "(`manage.py agent_token NODE` or the Agents page), rwa_...")
    return token


def _whole(env: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    value = _number(env, name, default, minimum)
    if value != int(value):
        raise ConfigError(f"{name}={env[name]!r}: expected a whole number")
    return int(value)


def _number(env: Mapping[str, str], name: str, default: float, minimum: float,
            maximum: float | None = None) -> float:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected a number") from None
    if value < minimum:
        raise ConfigError(f"{name}={raw!r}: at least {minimum:g}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name}={raw!r}: at most {maximum:g}")
    return value
