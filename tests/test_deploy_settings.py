"""With the production settings (secure cookies, a real secret, Postgres and Redis;
docker-compose's among them) Django's deployment checklist is clean, and the server
`serve` runs redirects plain HTTP to HTTPS, tells browsers to stay there, and believes
X-Forwarded-Proto only from the proxies it was told to trust."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from collectors.localray import free_port
from tests.conftest import wait_for
from tests.deploy import compose, resolved
from tests.patience import patient

ROOT = Path(__file__).resolve().parent.parent


def production_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    # Nothing the test run itself set (the browser fixture allows async-unsafe calls).
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAYWATCH_")
           and k not in {"DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE"}}
    return {**env, "RAYWATCH_DATA_DIR": str(tmp_path), "RAYWATCH_DEBUG": "0",
            "RAYWATCH_SECURE_COOKIES": "1", "RAYWATCH_SECRET_KEY": secrets.token_urlsafe(50),
            "DATABASE_URL": os.environ["DATABASE_URL"], "REDIS_URL": os.environ["REDIS_URL"],
            **extra}


def setting(env: dict[str, str], name: str) -> Any:
    """The value dashboard/settings.py gives `name` in `env` (its default is written there
    once, maybe computed from another setting)."""
    probe = f"import json; from dashboard import settings; print(json.dumps(settings.{name}))"
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_deployment_checklist_is_clean(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env=production_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_the_compose_settings_pass_the_checklist(tmp_path: Path) -> None:
    """docker-compose's own values (host, origins, proxy subnet, secure cookies); the
    test's database, Redis and key stand in for its secret files."""
    env = resolved(compose()["x-raywatch"]["environment"],
                   {"RAYWATCH_HOST": "raywatch.example.org", "RAY_ADDRESS": "http://head:8265"})
    env = {k: v for k, v in env.items()
           if not k.endswith("_FILE") and k not in {"DATABASE_URL", "REDIS_URL"}}
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env=production_env(tmp_path, **env), capture_output=True, text=True,
        timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_checklist_warns_when_https_is_turned_off(tmp_path: Path) -> None:
    env = production_env(tmp_path, RAYWATCH_SSL_REDIRECT="0", RAYWATCH_HSTS_SECONDS="0")
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "security.W004" in result.stderr and "security.W008" in result.stderr


# --- the server as deployed: `manage.py serve` behind a proxy ------------------------------
class Answer:
    def __init__(self, status: int, headers: Any) -> None:
        self.status, self.headers = status, headers


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def fetch(url: str, **headers: str) -> Answer:
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=5) as reply:
            return Answer(reply.status, reply.headers)
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, exc.headers)


def started(url: str) -> bool:
    try:
        return fetch(url).status == 200
    except OSError:
        return False


@pytest.fixture
def serve(db: None, tmp_path: Path) -> Iterator[Any]:
    """Start `manage.py serve --no-celery --no-agent` (docker-compose.yml's `web`) with the
    production env; the test database."""
    servers: list[subprocess.Popen[str]] = []
    name = connection.settings_dict["NAME"]
    database = os.environ["DATABASE_URL"].rsplit("/", 1)[0] + f"/{name}"

    def start(**extra: str) -> str:
        port = free_port()
        env = production_env(tmp_path, DATABASE_URL=database, RAYWATCH_GPU_SOURCE="off",
                             RAY_API_SERVER_ADDRESS=f"http://127.0.0.1:{free_port()}", **extra)
        servers.append(subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--no-celery", "--no-agent", "--port",
             str(port)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: started(f"{base}/healthz"), 60, 0.2, "serve to answer /healthz")
        return base

    yield start
    for server in servers:
        server.terminate()
        server.communicate(timeout=patient(30))


def test_plain_http_is_sent_to_https_and_probes_are_not(serve) -> None:  # type: ignore[no-untyped-def]
    base = serve()
    login = fetch(f"{base}/login/")
    assert login.status == 301
    assert login.headers["Location"] == f"https://127.0.0.1:{base.rsplit(':', 1)[1]}/login/"
    assert fetch(f"{base}/healthz").status == 200  # compose's health probe speaks HTTP


def test_https_from_the_trusted_proxy_is_served_with_hsts(serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    base = serve()  # the proxy is on this host: 127.0.0.1 is trusted by default
    login = fetch(f"{base}/login/", **{"X-Forwarded-Proto": "https"})
    assert login.status == 200
    max_age = setting(production_env(tmp_path), "SECURE_HSTS_SECONDS")
    assert max_age > 0, "secure cookies no longer turn HSTS on by default"
    assert login.headers["Strict-Transport-Security"] == f"max-age={max_age}; includeSubDomains"
    assert login.headers["X-Frame-Options"] == "DENY"
    assert login.headers["X-Content-Type-Options"] == "nosniff"
    cookie = login.headers["Set-Cookie"]
    assert "csrftoken=" in cookie and "Secure" in cookie


def test_forwarded_proto_from_an_untrusted_address_is_ignored(serve) -> None:  # type: ignore[no-untyped-def]
    base = serve(RAYWATCH_TRUSTED_PROXIES="10.0.0.2")  # the proxy is elsewhere, not us
    spoofed = fetch(f"{base}/login/", **{"X-Forwarded-Proto": "https"})
    assert spoofed.status == 301 and spoofed.headers["Location"].startswith("https://")
