"""`manage.py serve`: what `make run` runs. One process for the embedded default.

Checks the database (and Redis), starts a local Ray cluster when RAY_ADDRESS
is unset, runs the collectors (in-process, or Celery worker and beat as child
processes when REDIS_URL is set) and this host's node agent (`manage.py local_agent`:
the agent every node runs, reporting its GPUs and processes as theirs do), and serves
the dashboard with uvicorn.
Ctrl-C stops everything it started, and nothing else.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from contextlib import ExitStack, suppress
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from collectors.http import SourceError
from collectors.localray import LocalRay
from collectors.raystate import fetch_cluster
from dashboard.celery import app as celery_app
from dashboard.core import background, stopping
from dashboard.core.scheduler import EmbeddedScheduler


class Command(BaseCommand):
    help = "Serve raywatch: dashboard, live push and collectors."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--host", default=settings.SERVE_HOST)
        parser.add_argument("--port", type=int, default=settings.SERVE_PORT)
        parser.add_argument(
            "--no-celery", action="store_true",
            help="with REDIS_URL set, do not start a Celery worker and beat (run them yourself)",
        )
        parser.add_argument(
            "--no-agent", action="store_true",
            help="do not start this host's node agent (a container that sees none of the "
                 "host's GPUs and processes; the host runs its own agent)",
        )

    def handle(self, *args: Any, host: str, port: int, no_celery: bool, no_agent: bool,
               **options: Any) -> None:
        check_database()
        check_redis()
        with ExitStack() as cleanup:
            self.attach_ray(cleanup)
            if settings.EMBEDDED:
                cleanup.callback(background.finish)  # after the scheduler stopped
                scheduler = EmbeddedScheduler(celery_app, settings.CELERY_BEAT_SCHEDULE)
                scheduler.start()
                cleanup.callback(scheduler.stop)
                self.stdout.write("collectors: in-process scheduler (no REDIS_URL)")
            elif not no_celery:
                roles = ["worker", "notifier", "stacks", "beat"]
                cleanup.callback(stop_children, [start_celery(role) for role in roles])
                self.stdout.write(f"collectors: Celery {', '.join(roles)} on REDIS_URL")
            if not no_agent:
                cleanup.callback(stop_children, [start_local_agent(host, port)])
                self.stdout.write("this host's node agent: GPUs, processes and signals")
            url = f"http://{host}:{port}/"
            self.stdout.write(self.style.SUCCESS(f"raywatch on {url}  (Ctrl-C stops)"))
            sys.stdout.flush()
            # Ctrl-C does not wait out open pages' websockets and agents' 25 s command
            # long-polls (stopping.Server).
            server = stopping.Server(host, port, ws_ping_interval=20, ws_ping_timeout=20,
                                     forwarded_allow_ips=settings.TRUSTED_PROXIES)
            # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the
            # signal; turn both into KeyboardInterrupt so the cleanup below runs.
            signal.signal(signal.SIGTERM, _interrupt)
            with suppress(KeyboardInterrupt):
                server.run()
            self.stdout.write("stopping collectors" + (
                "" if settings.RAY_ADDRESS or settings.RAY_API_SERVER_ADDRESS
                else " and the local Ray cluster") + "…")
            sys.stdout.flush()

    def attach_ray(self, cleanup: ExitStack) -> None:
        if settings.RAY_ADDRESS or settings.RAY_API_SERVER_ADDRESS:
            from dashboard.cluster.endpoint import ray_endpoint

            try:
                endpoint = ray_endpoint()
                fetch_cluster(endpoint)
                self.stdout.write(f"Ray: watching {endpoint.dashboard_url}")
            except SourceError as exc:
                self.stderr.write(self.style.WARNING(
                    f"Ray: {exc.message}. raywatch starts anyway and keeps retrying; "
                    "the status strip shows the reason."
                ))
            return
        self.stdout.write("Ray: RAY_ADDRESS is unset, starting a local Ray cluster…")
        local = LocalRay(settings.LOCAL_RAY_FILE, num_cpus=settings.LOCAL_RAY_NUM_CPUS)
        try:
            cluster = local.start(log_path=settings.DATA_DIR / "local-ray.log")
        except RuntimeError as exc:
            raise CommandError(str(exc)) from None
        cleanup.callback(local.stop)
        # Ray turns token auth on for a local cluster; another process must ask for it
        # (docs/ray-facts.md), or ray.init() fails with InvalidAuthToken.
        self.stdout.write(
            f"Ray: local cluster up, dashboard {cluster.dashboard_url}, GCS {cluster.gcs_address}\n"
            f"     run Tune/jobs on it from a shell with token auth on:\n"
            f"       export RAY_AUTH_MODE=token\n"
            f"     then in Python: ray.init(address={cluster.gcs_address!r})\n"
            f"     Nothing to watch yet? `make demo` runs raywatch with a demo workload "
            f"(a hung, a slow and a failing trial, an orphan on a simulated GPU)."
        )


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def check_database() -> None:
    try:
        connection.ensure_connection()
    except Exception as exc:
        raise CommandError(f"cannot connect to the database ({_describe_db()}): {exc}") from None


def check_redis() -> None:
    if not settings.REDIS_URL:
        return
    import redis

    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=3, socket_timeout=3).ping()
    except Exception as exc:
        raise CommandError(f"cannot reach Redis at REDIS_URL: {exc}") from None


def _describe_db() -> str:
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"SQLite {db['NAME']}"
    return f"Postgres {db.get('HOST') or 'localhost'}:{db.get('PORT') or 5432}/{db.get('NAME')}"


def start_local_agent(host: str, port: int) -> subprocess.Popen[bytes]:
    """This host's node agent (`manage.py local_agent`), reporting to this server over
    loopback: behind an HTTPS redirect, to RAYWATCH_BASE_URL, as any node's agent."""
    if settings.SECURE_SSL_REDIRECT and settings.BASE_URL.startswith("https://"):
        url = settings.BASE_URL
    else:
        near = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
        url = f"http://{f'[{near}]' if ':' in near else near}:{port}"
    return subprocess.Popen([sys.executable, "manage.py", "local_agent", "--url", url],
                            cwd=settings.BASE_DIR)


def start_celery(role: str) -> subprocess.Popen[bytes]:
    if role == "beat":  # Celery beat, stopped between ticks (dashboard/core/beat.py)
        return subprocess.Popen([sys.executable, "-m", "dashboard.core.beat",
                                 str(settings.DATA_DIR / "celerybeat-schedule")],
                                cwd=settings.BASE_DIR)
    cmd = [sys.executable, "-m", "celery", "-A", "dashboard"]
    if role == "notifier":  # alert webhooks: I/O-bound, on their own queue and threads
        cmd += ["worker", "--queues", settings.NOTIFY_QUEUE, "--pool", "threads",
                "--concurrency", str(settings.NOTIFY_THREADS), "--hostname", "notify@%h"]
    elif role == "stacks":  # py-spy dumps waiting on agents: never ahead of an action
        cmd += ["worker", "--queues", settings.STACKS_QUEUE, "--pool", "threads",
                "--concurrency", str(settings.STACK_THREADS), "--hostname", "stacks@%h"]
    else:  # the collectors: two threads of one process, which holds the log reader once
        cmd += ["worker", "--pool", "threads", "--concurrency", "2"]
    cmd += ["--loglevel", "WARNING"]
    return subprocess.Popen(cmd)


def stop_children(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to all at once (Celery's warm shutdown finishes the tasks it runs), then
    wait for each; one still there after 15 s is killed."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + 15
    for process in processes:
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
