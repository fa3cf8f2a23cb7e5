"""raywatch's own host runs the node agent every node runs (`serve` starts it): its token
is issued once, kept in DATA_DIR readable by its user only, and reused across restarts;
one revoked on the Agents page, or issued for another node name, is replaced."""

from __future__ import annotations

import stat

import pytest
from django.utils import timezone

from collectors.agent.wire import token_key
from dashboard.agents import tokens
from dashboard.agents.local import agent_env, local_token, token_path
from dashboard.agents.models import NodeToken

pytestmark = [pytest.mark.both_backends, pytest.mark.django_db]


def test_the_hosts_token_is_kept_private_and_reused(settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings.DATA_DIR = tmp_path
    settings.NODE_NAME = "head-1"
    now = timezone.now()
    first = local_token(now)
    assert stat.S_IMODE(token_path().stat().st_mode) == 0o600
    assert token_path().read_text() == first
    row = NodeToken.objects.get(token_hash=token_key(first))
    assert (row.node, row.expires_at) == ("head-1", None)
    assert local_token(now) == first  # a restart: the same token, no new row
    assert NodeToken.objects.count() == 1

    tokens.revoke(row, None, now)  # an admin cut it off on the Agents page
    second = local_token(now)
    assert second != first and tokens.usable(now).filter(token_hash=token_key(second)).exists()

    settings.NODE_NAME = "head-renamed"
    third = local_token(now)
    assert NodeToken.objects.get(token_hash=token_key(third)).node == "head-renamed"


def test_the_agent_is_started_with_raywatchs_settings(settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings.DATA_DIR = tmp_path
    settings.NODE_NAME = "head-1"
    settings.GPU_SOURCE = "simulated"
    settings.CENTRAL_LOGS = True
    env = agent_env("http://127.0.0.1:8000", timezone.now(),
                    {"RAYWATCH_AGENT_TOKEN": "rwa_someone_elses", "HOME": "/home/x"})
    assert "RAYWATCH_AGENT_TOKEN" not in env  # a token given to serve is not this host's
    assert env["RAYWATCH_AGENT_TOKEN_FILE"] == str(token_path())
    assert (env["RAYWATCH_NODE_NAME"], env["RAYWATCH_GPU_SOURCE"]) == ("head-1", "simulated")
    # raywatch's own reader reads this host's trial logs: the agent must not send them too.
    assert env["RAYWATCH_AGENT_TRIAL_LOGS"] == "0"
    settings.CENTRAL_LOGS = False
    env = agent_env("http://127.0.0.1:8000", timezone.now(), {})
    assert env["RAYWATCH_AGENT_TRIAL_LOGS"] == "1"


def test_the_agent_is_given_none_of_serves_secrets(settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """serve's database URL, secret key and SSO secret stay with serve: the agent (and
    the py-spy it runs) is given the variables it reads and the system's own (issue 43,
    L8)."""
    settings.DATA_DIR = tmp_path
    serves = {"DATABASE_URL": "postgres://raywatch:db-pass@db/raywatch",
              "REDIS_URL": "redis://:redis-pass@redis:6379/0",
              "RAYWATCH_SECRET_KEY": "django-secret", "RAYWATCH_OIDC_CLIENT_SECRET": "sso",
              "RAYWATCH_AGENT_COMMAND_SECRET": "seals-command-keys",
              "AWS_SECRET_ACCESS_KEY": "cloud", "PATH": "/usr/bin", "HOME": "/home/x",
              "LC_ALL": "C.UTF-8", "RAYWATCH_LOG_DIRS": "/data/ray_results",
              "RAYWATCH_POLL_GPU_S": "2", "RAY_AUTH_TOKEN": "ray-token"}
    env = agent_env("http://127.0.0.1:8000", timezone.now(), serves)
    for secret in ("db-pass", "redis-pass", "django-secret", "sso", "seals-command-keys",
                   "cloud"):
        assert not [k for k, v in env.items() if secret in v], secret
    for kept in ("PATH", "HOME", "LC_ALL", "RAYWATCH_LOG_DIRS", "RAYWATCH_POLL_GPU_S",
                 "RAY_AUTH_TOKEN"):
        assert env[kept] == serves[kept], kept


def test_every_variable_the_agent_reads_is_passed_on() -> None:
    """The list serve passes on holds each variable the agent's code reads: a new
    setting of the agent is not silently dropped on raywatch's own host."""
    import re
    from pathlib import Path

    from collectors.agent.config import SYSTEM_VARIABLES, VARIABLES
    root = Path(__file__).resolve().parent.parent / "collectors"
    read = set()
    for path in [*root.glob("agent/*.py"), root / "simnvml.py"]:
        read |= set(re.findall(r'(?:env\.get\(|environ\.get\(|\w+\(env, )"([A-Z][A-Z0-9_]*)"',
                               path.read_text()))
    assert {"RAYWATCH_URL", "XDG_STATE_HOME"} <= read, read
    assert read <= VARIABLES | SYSTEM_VARIABLES, sorted(read - VARIABLES - SYSTEM_VARIABLES)


def test_an_agent_told_to_read_no_trial_log_reads_none() -> None:
    from collectors.agent.config import AgentConfig, ConfigError

    base = {"RAYWATCH_URL": "http://127.0.0.1:8000", "RAYWATCH_AGENT_TOKEN": "rwa_x"}
    assert AgentConfig.from_env(base).trial_logs
    assert not AgentConfig.from_env({**base, "RAYWATCH_AGENT_TRIAL_LOGS": "0"}).trial_logs
    with pytest.raises(ConfigError, match="RAYWATCH_AGENT_TRIAL_LOGS='maybe'"):
        AgentConfig.from_env({**base, "RAYWATCH_AGENT_TRIAL_LOGS": "maybe"})
