"""A malformed setting stops raywatch at start with a message naming the variable;
with nothing set, raywatch runs on the embedded default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
# What manage.py reads in the environment run_manage passes on: its default, written once
# in dashboard/settings.py, unless this run set RAYWATCH_AGENT_STALE_S.
STALE_S = settings.AGENT_STALE_S


def run_manage(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items()
             if k not in {"DATABASE_URL", "REDIS_URL", "RAY_ADDRESS", "DJANGO_SETTINGS_MODULE"}}
    clean.update({"RAYWATCH_DATA_DIR": str(tmp_path), **env})
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=clean,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("DATABASE_URL", "mysql://db/raywatch", "must start with one of"),
        ("DATABASE_URL", "postgres://:5432/x", "names no host"),
        ("REDIS_URL", "redis://localhost:notaport/0", "malformed port"),
        ("RAYWATCH_POLL_RAY_S", "soon", "is not a number"),
        ("RAYWATCH_POLL_RAY_S", "0.01", "must be at least"),
        ("RAYWATCH_DEBUG", "maybe", "is not a boolean"),
        ("PORT", "eighty", "is not a whole number"),
        ("RAY_ADDRESS", "auto", "give the head node's address explicitly"),
        ("RAYWATCH_SECRET_KEY_FILE", "/nonexistent/secret", "cannot be read"),
        ("RAYWATCH_METRICS_ALLOW", "10.0.0.0/33", "is not an address or network"),
        ("RAYWATCH_METRICS_TOKEN_FILE", "/nonexistent/token", "cannot be read"),
        ("RAYWATCH_AGENT_SEND_MAX_S", f"{STALE_S / 2 + 1:g}",
         f"at most half of RAYWATCH_AGENT_STALE_S ({STALE_S:g})"),
        ("RAYWATCH_AGENT_REPORTS_PER_S", "0", "must be at least"),
    ],
)
def test_malformed_setting_names_the_variable(tmp_path: Path, name: str, value: str,
                                              expected: str) -> None:
    result = run_manage(tmp_path, "check", **{name: value})
    assert result.returncode != 0
    assert f"raywatch: bad setting: {name}" in result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_password_in_a_bad_url_is_not_echoed(tmp_path: Path) -> None:
    result = run_manage(tmp_path, "check", DATABASE_URL="mysql://u:hunter2@db/x")
    assert result.returncode != 0
    assert "hunter2" not in result.stderr


def test_embedded_default_without_database_or_redis(tmp_path: Path) -> None:
    probe = (
        "import json; from django.conf import settings as s; print(json.dumps({"
        "'engine': s.DATABASES['default']['ENGINE'],"
        "'journal': s.DATABASES['default']['OPTIONS'].get('init_command', ''),"
        "'layer': s.CHANNEL_LAYERS['default']['BACKEND'], 'embedded': s.EMBEDDED}))"
    )
    result = run_manage(tmp_path, "shell", "-c", probe)
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["engine"] == "django.db.backends.sqlite3"
    assert "journal_mode=WAL" in got["journal"]
    assert got["layer"] == "channels.layers.InMemoryChannelLayer"
    assert got["embedded"] is True


def test_production_stack_with_database_and_redis(tmp_path: Path) -> None:
    probe = (
        "import json; from django.conf import settings as s; print(json.dumps({"
        "'engine': s.DATABASES['default']['ENGINE'], 'broker': s.CELERY_BROKER_URL,"
        "'layer': s.CHANNEL_LAYERS['default']['BACKEND'], 'embedded': s.EMBEDDED}))"
    )
    result = run_manage(tmp_path, "shell", "-c", probe,
                        DATABASE_URL=os.environ["DATABASE_URL"], REDIS_URL=os.environ["REDIS_URL"])
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got == {"engine": "django.db.backends.postgresql", "broker": os.environ["REDIS_URL"],
                   "layer": "channels_redis.core.RedisChannelLayer", "embedded": False}


def test_database_and_redis_passwords_come_from_secret_files(tmp_path: Path) -> None:
    """As the compose file gives them: Docker secrets, never in the URLs themselves."""
    (tmp_path / "pg").write_text("p@ss:w/rd\n")
    (tmp_path / "redis").write_text("r3dis secret\n")
    probe = (
        "import json; from django.conf import settings as s; print(json.dumps({"
        "'user': s.DATABASES['default']['USER'], 'password': s.DATABASES['default']['PASSWORD'],"
        "'host': s.DATABASES['default']['HOST'], 'broker': s.CELERY_BROKER_URL}))"
    )
    result = run_manage(tmp_path, "shell", "-c", probe,
                        DATABASE_URL="postgres://raywatch@db:5432/raywatch",
                        RAYWATCH_DATABASE_PASSWORD_FILE=str(tmp_path / "pg"),
                        REDIS_URL="redis://redis:6379/0",
                        RAYWATCH_REDIS_PASSWORD_FILE=str(tmp_path / "redis"))
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got == {"user": "raywatch", "password": "p@ss:w/rd", "host": "db",
                   "broker": "redis://:r3dis%20secret@redis:6379/0"}
    alone = run_manage(tmp_path, "check", RAYWATCH_REDIS_PASSWORD="x")  # no REDIS_URL
    assert alone.returncode != 0 and "RAYWATCH_REDIS_PASSWORD is set but REDIS_URL" in \
        alone.stderr
