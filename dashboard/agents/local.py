"""raywatch's own host runs the same node agent as every other node: `serve` starts
`python -m collectors.agent` beside itself (collectors/agent/, docs/agents.md), and this
is that agent's token. It is issued once, like any node token, and kept in DATA_DIR
(mode 0600: the file is the only copy; raywatch keeps its hash); a restart reuses it. A
token revoked on the Agents page, or issued for another node name, is replaced at the
next start."""

from __future__ import annotations

import contextlib
import os
from datetime import datetime
from pathlib import Path

from django.conf import settings

from collectors.agent.config import agent_environment
from collectors.agent.wire import token_key
from collectors.hostinfo import host_name
from dashboard.agents import tokens

TOKEN_FILE = "agent-token"
SPOOL_DIR = "agent-spool"


def node_name() -> str:
    """The name raywatch's own host reports under (RAYWATCH_NODE_NAME, else its host name)."""
    return settings.NODE_NAME or host_name()


def token_path() -> Path:
    return Path(settings.DATA_DIR) / TOKEN_FILE


def local_token(now: datetime) -> str:
    """The live token of this host's agent: the one kept in DATA_DIR, else a new one
    (never expiring: it lives as long as this host's raywatch; revoking it on the Agents
    page cuts the agent off until the next start)."""
    path, node = token_path(), node_name()
    with contextlib.suppress(OSError):
        kept = path.read_text().strip()
        if kept.startswith(tokens.PREFIX) and tokens.usable(now).filter(
                token_hash=token_key(kept), node=node).exists():
            return kept
    _, token = tokens.issue(node, None, now, settings.NODE_IP or "", "", expires_days=0)
    _write_private(path, token)
    return token


def _write_private(path: Path, text: str) -> None:
    """Written whole (a rename) and readable by this user only, from its first byte."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def agent_env(url: str, now: datetime, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment `serve` starts its host's agent with: raywatch's own settings for
    GPUs, logs and Ray's temp dir come through unchanged (the agent reads the same
    variables), and nothing else of serve's (its database URL, secret key and SSO secret:
    collectors/agent/config.agent_environment); what differs is said here."""
    env = agent_environment(os.environ if base is None else base, settings.AGENT_PASS_ENV)
    env.pop("RAYWATCH_AGENT_TOKEN", None)  # a node token given to serve is not this host's
    local_token(now)
    env.update({
        "RAYWATCH_URL": url,
        "RAYWATCH_AGENT_TOKEN_FILE": str(token_path()),
        "RAYWATCH_NODE_NAME": node_name(),
        "RAYWATCH_AGENT_SPOOL": str(Path(settings.DATA_DIR) / SPOOL_DIR),
        "RAYWATCH_GPU_SOURCE": settings.GPU_SOURCE,
        # raywatch's own reader reads this host's trial logs while RAYWATCH_CENTRAL_LOGS
        # is on: the agent would send the same lines again.
        "RAYWATCH_AGENT_TRIAL_LOGS": "0" if settings.CENTRAL_LOGS else "1",
    })
    if settings.NODE_IP:
        env["RAYWATCH_NODE_IP"] = settings.NODE_IP
    return env
