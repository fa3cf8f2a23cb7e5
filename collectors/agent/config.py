"""The agent's settings, from its environment, read once at start; a bad value stops it
with a message that names the variable (like raywatch's own settings).

docs/settings.md is generated from this file too (dashboard/settingsdoc.py, `make
settings-doc`): the comment right above the line that reads a variable is its description
there (a variable raywatch's server reads as well is described in dashboard/settings.py),
and a `# default: ...` line says how to show a default that is not a plain value. The
defaults the server shares are written once, in collectors/defaults.py."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from collectors.defaults import (
    GPU_SOURCE,
    GPU_SOURCES,
    LOG_QUIET_S,
    LOG_RESCAN_PER_POLL,
    LOG_RESCAN_S,
    NVML_MODULE,
    POLL_GPU_S,
    RAY_TMP_DIR,
)
from collectors.rootfiles import JSON_FILE_MAX_MB, LOG_FILE_MAX_MB, Caps

SIMULATED_MODULE = "collectors.simnvml"
# The agent's own defaults (raywatch's server has its own, or none, for these).
POLL_LOGS_S = 1.0
PROCESSES_S = 5.0
SPOOL_MB = 256
TIMEOUT_S = 10.0
BACKOFF_CAP_S = 30.0


class ConfigError(Exception):
    pass


# What an agent started by raywatch (`serve`'s own host's agent) is given of its
# starter's environment: the variables the agent reads, and the system's own. Not the
# rest: serve's database URL, secret key and SSO secret are none of the agent's
# business, and py-spy, which the agent runs, would inherit them.
VARIABLES = frozenset({
    "RAYWATCH_AGENT_BACKOFF_CAP_S", "RAYWATCH_AGENT_PROCESSES_S", "RAYWATCH_AGENT_SEND_S",
    "RAYWATCH_AGENT_SPOOL", "RAYWATCH_AGENT_SPOOL_MB", "RAYWATCH_AGENT_TIMEOUT_S",
    "RAYWATCH_AGENT_TOKEN", "RAYWATCH_AGENT_TOKEN_FILE", "RAYWATCH_AGENT_TRIAL_LOGS",
    "RAYWATCH_GPU_SOURCE", "RAYWATCH_KUBERAY_NAME", "RAYWATCH_KUBERAY_NAMESPACE",
    "RAYWATCH_LOG_DIRS", "RAYWATCH_LOG_FILE_MAX_MB", "RAYWATCH_LOG_JSON_FILE_MAX_MB",
    "RAYWATCH_LOG_LEVEL", "RAYWATCH_LOG_QUIET_S", "RAYWATCH_LOG_RESCAN_PER_POLL",
    "RAYWATCH_LOG_RESCAN_S", "RAYWATCH_NODE_IP", "RAYWATCH_NODE_NAME",
    "RAYWATCH_NVML_MODULE", "RAYWATCH_POLL_GPU_S", "RAYWATCH_POLL_LOGS_S", "RAYWATCH_PY_SPY",
    "RAYWATCH_RAY_TMP_DIR", "RAYWATCH_SIM_GCS", "RAYWATCH_SIM_GPUS", "RAYWATCH_URL",
    # Simulated GPUs ask the cluster's GCS which worker holds which GPU.
    "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH",
    # A KubeRay head's own name (collectors/agent/headinfo.py).
    "RAY_CLUSTER_NAME", "RAY_CLUSTER_NAMESPACE", "POD_NAMESPACE",
})
SYSTEM_VARIABLES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
    "XDG_STATE_HOME",
    "PYTHONPATH", "PYTHONHASHSEED", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "SSL_CERT_FILE",
    "SSL_CERT_DIR", "NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY",
    "http_proxy",
})


def agent_environment(env: Mapping[str, str], also: Iterable[str] = ()) -> dict[str, str]:
    """What of `env` an agent started by raywatch is given (VARIABLES, SYSTEM_VARIABLES,
    the locale's LC_* and the names in `also`: RAYWATCH_AGENT_PASS_ENV)."""
    passed = VARIABLES | SYSTEM_VARIABLES | set(also)
    return {name: value for name, value in env.items()
            if name in passed or name.startswith("LC_")}


# --- node agent: its own settings (docs/agents.md) -----------------------------------------
# A variable the server reads too is described in dashboard/settings.py; a comment on its
# read here adds what differs on a node agent.
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
    ray_tmp_dir: Path = Path(RAY_TMP_DIR)  # every Ray session's live driver_artifacts
    poll_logs_s: float = POLL_LOGS_S
    backoff_cap_s: float = BACKOFF_CAP_S
    log_quiet_s: float = LOG_QUIET_S
    log_rescan_s: float = LOG_RESCAN_S
    # quiet trial dirs the slow rescan checks a poll, at most
    log_rescan_per_poll: int = LOG_RESCAN_PER_POLL
    trial_logs: bool = True  # read and send its node's trial logs
    log_file_max_mb: int = LOG_FILE_MAX_MB  # a larger log file is refused (rootfiles)
    log_json_file_max_mb: int = JSON_FILE_MAX_MB  # params.json, experiment_state: parsed whole
    processes_s: float = PROCESSES_S  # between process snapshots (every GPU poll after a signal)
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
        gpu_source = env.get("RAYWATCH_GPU_SOURCE", GPU_SOURCE)
        if gpu_source not in GPU_SOURCES:
            raise ConfigError(f"RAYWATCH_GPU_SOURCE={gpu_source!r}: one of "
                              f"{', '.join(GPU_SOURCES)}")
        module = SIMULATED_MODULE if gpu_source == "simulated" else env.get(
            "RAYWATCH_NVML_MODULE", NVML_MODULE)
        state = Path(env.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
        return cls(
            # raywatch's address as the node reaches it, https://raywatch.example.org.
            # default: none: required
            url=_url(env.get("RAYWATCH_URL", "")),
            token=_token(env),
            # default: the token's node
            node_name=env.get("RAYWATCH_NODE_NAME") or None,
            # default: the address given at issue (`agent_token --ip`), else the first report's
            node_ip=env.get("RAYWATCH_NODE_IP") or None,
            # The spool: batches not yet acknowledged by raywatch, and the trial-log
            # cursors; a restart or an outage loses and doubles nothing that fits.
            # default: `$XDG_STATE_HOME/raywatch-agent`, else `~/.local/state/raywatch-agent`
            spool_dir=Path(env.get("RAYWATCH_AGENT_SPOOL") or state / "raywatch-agent"
                           ).expanduser(),
            # The spool's cap in MiB: past it the oldest batches are dropped, and the count
            # shows on the Agents page.
            spool_max_bytes=int(_number(env, "RAYWATCH_AGENT_SPOOL_MB", SPOOL_MB, 1)
                                * 1024 * 1024),
            poll_s=_number(env, "RAYWATCH_POLL_GPU_S", POLL_GPU_S, 0.2),
            gpu_source=gpu_source,
            nvml_module=module,
            # Roots added to its defaults, separated by ":" or commas (e.g. shared storage).
            log_dirs=log_dirs(env.get("RAYWATCH_LOG_DIRS", "")),
            ray_tmp_dir=Path(env.get("RAYWATCH_RAY_TMP_DIR") or RAY_TMP_DIR).expanduser(),
            poll_logs_s=_number(env, "RAYWATCH_POLL_LOGS_S", POLL_LOGS_S, 0.2),
            # 0: read no trial log (GPUs, processes and signals only). `serve` starts its
            # own host's agent with 0 while raywatch's own reader reads this host's logs
            # (RAYWATCH_CENTRAL_LOGS, on by default).
            trial_logs=_flag(env, "RAYWATCH_AGENT_TRIAL_LOGS", True),
            log_quiet_s=_number(env, "RAYWATCH_LOG_QUIET_S", LOG_QUIET_S, 0),
            log_rescan_s=_number(env, "RAYWATCH_LOG_RESCAN_S", LOG_RESCAN_S, 1),
            log_rescan_per_poll=_whole(env, "RAYWATCH_LOG_RESCAN_PER_POLL",
                                       LOG_RESCAN_PER_POLL, 1),
            log_file_max_mb=_whole(env, "RAYWATCH_LOG_FILE_MAX_MB", LOG_FILE_MAX_MB, 1),
            log_json_file_max_mb=_whole(env, "RAYWATCH_LOG_JSON_FILE_MAX_MB",
                                        JSON_FILE_MAX_MB, 1),
            # Seconds each request to raywatch may take.
            timeout_s=_number(env, "RAYWATCH_AGENT_TIMEOUT_S", TIMEOUT_S, 1),
            # The longest wait, in seconds, between two tries while raywatch does not answer
            # (from 1 s, doubling, with jitter); a reply's Retry-After wins. Longer spreads a
            # few hundred agents' returns after an outage; what is spooled meanwhile is kept.
            backoff_cap_s=_number(env, "RAYWATCH_AGENT_BACKOFF_CAP_S", BACKOFF_CAP_S, 1),
            # py-spy for a stalled trial's stack on this node (raywatch's own host: its
            # agent's, which `serve` starts with raywatch's environment).
            # default: the one beside Python, else on `PATH`
            py_spy=env.get("RAYWATCH_PY_SPY") or None,
            # Seconds between snapshots of its node's Ray worker and GPU processes (CPU %,
            # RSS, state, threads); for 30 s after it signalled a process, one at every GPU
            # poll.
            processes_s=_number(env, "RAYWATCH_AGENT_PROCESSES_S", PROCESSES_S, 0.2),
            # Seconds to gather before a report (0: send what is spooled at once). Unset: as
            # long as raywatch's answers ask (`send_s`): every poll on a small cluster, every
            # few seconds on one of hundreds of nodes, where a report of five polls costs
            # raywatch about what a report of one does (bench/gpu_reports_bench.py); trial
            # results then arrive that much later.
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
    # The node token an admin issued (`manage.py agent_token NODE` or the Agents page,
    # rwa_...); raywatch keeps only its hash.
    # default: none: required
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


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={env[name]!r}: expected 1 or 0")


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
