"""`make test`: make sure Chromium, Postgres and Redis are there, then run pytest.

Postgres and Redis come from DATABASE_URL and REDIS_URL, defaulting to the
standard local ports. If nothing answers there, throwaway instances are started
from the installed binaries and removed afterwards; if there are none, this
says what to install. pytest's "no tests ran" (exit 5) counts as a failure.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlparse

CHROMIUM = "/usr/bin/chromium"
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/raywatch"
DEFAULT_REDIS = "redis://127.0.0.1:6379/15"


def say(msg: str) -> None:
    print(f"[make test] {msg}", flush=True)


def fail(msg: str) -> None:
    print(f"[make test] ERROR: {msg}", file=sys.stderr, flush=True)
    sys.exit(2)


def answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ensure_chromium() -> None:
    if Path(CHROMIUM).exists():
        return
    say("Debian Chromium is missing; installing it with apt-get (browser tests need it)")
    if os.geteuid() != 0:
        fail("run `sudo apt-get install -y chromium` (Debian's package), then `make test` again")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
    result = subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"], env=env
    )
    if result.returncode != 0 or not Path(CHROMIUM).exists():
        fail("could not install Debian's chromium package: install it by hand")


def _as_postgres(cmd: list[str]) -> list[str]:
    # Postgres refuses to run as root.
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def start_throwaway_postgres(stack: ExitStack) -> str:
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    initdb = bins[-1] if bins else shutil.which("initdb")
    if not initdb:
        fail("no Postgres answers at DATABASE_URL and no Postgres binaries are installed: "
             "`apt-get install postgresql`, or set DATABASE_URL to a server you have")
    bindir = Path(initdb).parent
    root = Path(tempfile.mkdtemp(prefix="raywatch-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    stack.callback(shutil.rmtree, root, True)
    port = free_port()
    say(f"no Postgres answers; starting a throwaway one on port {port} in {root}")
    subprocess.run(_as_postgres([str(initdb), "-D", str(root / "data"), "-A", "trust",
                                 "-U", "postgres"]), check=True, stdout=subprocess.DEVNULL)
    server = subprocess.Popen(_as_postgres([
        str(bindir / "postgres"), "-D", str(root / "data"), "-p", str(port),
        "-k", str(root), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
    ]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stack.callback(_stop, server)
    _wait_for("127.0.0.1", port, "Postgres")
    return f"postgres://postgres@127.0.0.1:{port}/raywatch"


def start_throwaway_redis(stack: ExitStack) -> str:
    binary = shutil.which("redis-server")
    if not binary:
        fail("no Redis answers at REDIS_URL and redis-server is not installed: "
             "`apt-get install redis-server`, or set REDIS_URL to a server you have")
    port = free_port()
    say(f"no Redis answers; starting a throwaway one on port {port}")
    server = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    stack.callback(_stop, server)
    _wait_for("127.0.0.1", port, "Redis")
    return f"redis://127.0.0.1:{port}/15"


def _wait_for(host: str, port: int, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if answers(host, port):
            return
        time.sleep(0.2)
    fail(f"the throwaway {what} did not start on port {port}")


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()


def main(argv: list[str]) -> int:
    ensure_chromium()
    with ExitStack() as stack:
        db_url = os.environ.get("DATABASE_URL") or DEFAULT_DB
        parsed = urlparse(db_url)
        if not answers(parsed.hostname or "127.0.0.1", parsed.port or 5432):
            db_url = start_throwaway_postgres(stack)
        redis_url = os.environ.get("REDIS_URL") or DEFAULT_REDIS
        parsed = urlparse(redis_url)
        if not answers(parsed.hostname or "127.0.0.1", parsed.port or 6379):
            redis_url = start_throwaway_redis(stack)
        env = {**os.environ, "DATABASE_URL": db_url, "REDIS_URL": redis_url,
               "RAYWATCH_DATA_DIR": tempfile.mkdtemp(prefix="raywatch-test-data-"),
               # Server threads in the tests must not hold the test database open.
               "RAYWATCH_DB_CONN_MAX_AGE": "0"}
        say(f"Postgres {urlparse(db_url).netloc}, Redis {urlparse(redis_url).netloc}")
        code = subprocess.call([sys.executable, "-m", "pytest", *argv], env=env)
    if code == 5:
        print("[make test] ERROR: pytest collected no tests: that is a failure", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
