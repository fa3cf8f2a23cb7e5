"""Shared fixtures: personas, a real local Ray cluster, an ASGI server, Chromium."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from channels.layers import channel_layers
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import Group, User
from django.db import connection as db_connection
from django.test import Client
from knox.models import AuthToken
from rest_framework.test import APIClient

from collectors.localray import LocalCluster, LocalRay, free_port, free_ports
from dashboard.celery import app as celery_app
from dashboard.core import stopping
from dashboard.core.scheduler import EmbeddedScheduler
from tests import embedded
from tests.patience import ms, patient
from tests.receivers import Receiver

# Ray reads this once, when it is first imported: a driver that joins the test
# cluster from this process needs token auth on (docs/ray-facts.md).
os.environ.setdefault("RAY_AUTH_MODE", "token")
# serve's own agent reads tests/fake_pynvml.py's spec: passed on to it as an operator
# passes an NVML shim's own variable.
os.environ.setdefault("RAYWATCH_AGENT_PASS_ENV", "FAKE_NVML_SPEC")


def _ensure_ray_token() -> None:
    """Write ~/.ray/auth_token once, before any cluster starts. On a fresh HOME each
    `ray.init()` writes a new token without a lock, and this session's cluster and the
    SQLite rerun's start at about the same time: a head whose GCS kept one token while
    the file holds the other refuses nodes that join with the file's."""
    path = Path.home() / ".ray" / "auth_token"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_hex(32))


_ensure_ray_token()

PASSWORD = "correct horse battery staple"
BENCH_BACKGROUND = "RAYWATCH_BENCH_SMOKE_IN_BACKGROUND"  # set in the background run itself
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]


@pytest.hookimpl(tryfirst=True)  # before pytest-timeout reads the test timeout
def pytest_configure(config: pytest.Config) -> None:
    # The test timeout (pyproject.toml's, or a test's timeout mark) is stretched alike,
    # unless --timeout or PYTEST_TIMEOUT gives one.
    if config.getvalue("timeout") is None and not os.environ.get("PYTEST_TIMEOUT"):
        config.option.timeout = patient(float(config.getini("timeout") or 0)) or None
    # A loaded CI machine (several pytest processes, Ray and Chromium on two cores) can take
    # more than Playwright's 5 s to answer a fetch; an assertion's outcome stays the same.
    from playwright.sync_api import expect

    expect.set_options(timeout=ms(15))


# Users made by the tests are hashed with PBKDF2 at few iterations: the suite creates and
# logs in hundreds, and the shipped count costs about a third of a second each. The
# algorithm is Django's own, so servers the tests start as processes check them as usual.
class QuickPBKDF2(PBKDF2PasswordHasher):
    iterations = 1_000


@pytest.fixture(scope="session", autouse=True)
def _quick_password_hashing() -> Iterator[None]:
    from django.conf import settings as django_settings
    from django.contrib.auth.hashers import get_hashers, get_hashers_by_algorithm

    shipped = django_settings.PASSWORD_HASHERS
    django_settings.PASSWORD_HASHERS = ["tests.conftest.QuickPBKDF2", *shipped]
    get_hashers.cache_clear()
    get_hashers_by_algorithm.cache_clear()
    yield
    django_settings.PASSWORD_HASHERS = shipped
    get_hashers.cache_clear()
    get_hashers_by_algorithm.cache_clear()


@pytest.hookimpl(tryfirst=True)  # before -m selects by marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`ray` and `browser` say what a test needs, so they are not kept by hand: every test
    that uses the session's real cluster (the ray_cluster fixture, directly or through
    ray_settings or watched) carries `ray`, and every test that drives Chromium (the
    browser fixture, directly or through page) carries `browser`."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        for fixture, mark in (("ray_cluster", pytest.mark.ray), ("browser", pytest.mark.browser)):
            if fixture in fixtures and item.get_closest_marker(mark.name) is None:
                item.add_marker(mark)
        timeout = item.get_closest_marker("timeout")
        if timeout is not None and timeout.args:  # a test's own timeout, stretched alike
            item.add_marker(pytest.mark.timeout(patient(timeout.args[0])), append=False)


# --- the SQLite rerun starts with the session (tests/test_on_embedded_default.py) ----------
def pytest_collection_finish(session: pytest.Session) -> None:
    option = session.config.option
    if option.collectonly or option.setupplan or option.setuponly:  # no test runs
        return
    ids = [item.nodeid for item in session.items]
    first = None
    if any(i.startswith("tests/test_on_embedded_default.py") for i in ids):
        from tests.test_on_embedded_default import RERUN

        first = embedded.start_on_embedded_default(*RERUN)
    # The bench smokes run in the background too, after the SQLite rerun (one background
    # run at a time), when the suite has other tests to overlap them with.
    smokes = [i for i in ids if i.startswith("tests/test_benches_smoke.py::test_bench_runs")]
    if first and smokes and len(smokes) < len(ids) and not os.environ.get(BENCH_BACKGROUND):
        from tests.test_benches_smoke import start_in_background

        start_in_background(first, smokes)


EXIT_STATUS = pytest.StashKey[int]()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    embedded.stop_all()
    session.config.stash[EXIT_STATUS] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """The verdict is the tests' own: once pytest has written its report, this process
    ends with pytest's exit status without the interpreter's teardown (pytest's summary
    stays the last line: tests/test_on_embedded_default.py reads it). That teardown runs
    no test, but this process joined Ray clusters as a driver and opened gRPC channels
    from many threads, and once, after all 818 tests had passed, it died there of SIGSEGV
    (a known way for gRPC's and Ray's C threads to end, ray-project/ray#33285, #36885)."""
    if EXIT_STATUS not in config.stash:  # --collect-only and the like: as usual
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(config.stash[EXIT_STATUS])


@pytest.fixture(scope="session", autouse=True)
def _migrated_once() -> Iterator[None]:
    """tests/served.py's `migrate` keeps one migrated database per backend: removed here."""
    from tests import served

    yield
    served.forget_migrated()


# --- the embedded default's append-only audit -----------------------------------------
@pytest.fixture(scope="session", autouse=True)
def _flush_past_sqlite_audit_triggers() -> Iterator[None]:
    """Between transactional tests Django empties every table: TRUNCATE on Postgres,
    DELETE on SQLite, which the audit's triggers refuse. The test flush lifts them for
    its own statements and puts them back."""
    import importlib

    # Through the backend's base module: importing operations first is an import cycle
    # when nothing has loaded the SQLite backend yet (the suite runs on Postgres).
    from django.db.backends.sqlite3.base import DatabaseWrapper

    DatabaseOperations = DatabaseWrapper.ops_class

    triggers = importlib.import_module("dashboard.actions.migrations.0003_append_only_sqlite")
    original = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, **kwargs):  # type: ignore[no-untyped-def]
        statements = original(self, style, tables, **kwargs)
        return [*triggers.drop_sql(), *statements, *triggers.create_sql()] if statements \
            else statements

    DatabaseOperations.sql_flush = sql_flush  # type: ignore[method-assign]
    # On Postgres the flush is one TRUNCATE, which the audit's statement triggers refuse
    # (0005): lifted for that statement alone, in the flush's own transaction.
    from django.db.backends.postgresql.base import DatabaseWrapper as Postgres

    PostgresOperations = Postgres.ops_class
    no_truncate = importlib.import_module("dashboard.actions.migrations.0005_audit_no_truncate")
    postgres_original = PostgresOperations.sql_flush

    def postgres_flush(self, style, tables, **kwargs):  # type: ignore[no-untyped-def]
        statements = postgres_original(self, style, tables, **kwargs)
        return [*no_truncate.lifted_sql(), *statements, *no_truncate.restored_sql()] \
            if statements and set(no_truncate.TABLES.values()) & set(tables) else statements

    PostgresOperations.sql_flush = postgres_flush  # type: ignore[method-assign]
    yield
    DatabaseOperations.sql_flush = original  # type: ignore[method-assign]
    PostgresOperations.sql_flush = postgres_original  # type: ignore[method-assign]


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):  # type: ignore[no-untyped-def]
    """pytest-django's, and before it drops the test database: the connections that the
    in-process background pool's threads still hold are ended (only their threads could
    close them), else Postgres refuses the drop after a 5 s wait and the database stays."""
    yield
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")


# --- personas ------------------------------------------------------------------------
def api_token(user: User) -> str:
    """A new API token of `user`, as `manage.py drf_create_token` prints it."""
    return AuthToken.objects.create(user)[1]


def token_client(user: User) -> APIClient:
    """An API client authenticated as `user` with a token, as scripts call the API."""
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {api_token(user)}")
    return api


def log_in(client: Client, username: str, password: str, path: str = "/login/"):  # type: ignore[no-untyped-def]
    """Post the login form (`path`: the admin's is /admin/login/) through Django's client."""
    return client.post(path, {"username": username, "password": password})


def logged_in(reply) -> bool:  # type: ignore[no-untyped-def]
    """Whether log_in's reply is a successful login: the redirect to the home page."""
    return reply.status_code == 302 and reply["Location"] == "/"


def make_user(username: str, role: str | None) -> User:
    user = User.objects.create_user(username=username, password=PASSWORD)
    if role:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


@pytest.fixture
def admin(db: None) -> User:
    return make_user("alice-admin", "admin")


@pytest.fixture
def operator(db: None) -> User:
    return make_user("oscar-operator", "operator")


@pytest.fixture
def viewer(db: None) -> User:
    return make_user("vera-viewer", "viewer")


@pytest.fixture
def roleless(db: None) -> User:
    return make_user("nina-norole", None)


# --- Ray ------------------------------------------------------------------------------
# Where `ray start --head` leaves its address for a plain ray.init() on this machine to
# join: a test run leaves it as it found it (a test's own head once pointed it at a GCS
# the test then stopped, and the next plain ray.init() on the machine hung).
RAY_CURRENT = Path("/tmp/ray/ray_current_cluster")


def ray_current_cluster() -> str | None:
    try:
        return RAY_CURRENT.read_text()
    except OSError:
        return None


@pytest.fixture(scope="session", autouse=True)
def ray_temp_dir_of_the_run() -> Iterator[Path]:
    """Ray's default temp dir for this run (RAY_TMPDIR, which Ray reads): a cluster a test
    starts without a temp dir of its own (`serve`'s local cluster, the demo's) keeps its
    sessions there, not in /tmp/ray, and they go with it. Last to end: the run fails if
    /tmp/ray/ray_current_cluster changed all the same."""
    before = ray_current_cluster()
    temp_dir = Path(tempfile.mkdtemp(prefix="rwd-", dir="/tmp"))  # short: socket paths
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_TMPDIR", str(temp_dir))
        yield temp_dir
    shutil.rmtree(temp_dir, ignore_errors=True)
    assert ray_current_cluster() == before, (
        f"the run changed {RAY_CURRENT} (was {before!r}, now {ray_current_cluster()!r}): "
        "a test ran `ray start` in /tmp/ray (no --temp-dir, and not this run's RAY_TMPDIR), "
        "and a plain ray.init() on this machine would now try that node's stopped GCS")


@pytest.fixture(autouse=True)
def host_log_reader_of_its_own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Each test's reading of this host's log dirs starts with cursors of its own: the
    database is emptied between tests, and cursors kept from an earlier test would say
    its files were read."""
    from dashboard.trials import ingest

    where = tmp_path_factory.mktemp("host-reader")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ingest, "state_dir", lambda: where)
        yield
    ingest.forget_reader()


@pytest.fixture
def hung_process() -> Iterator[subprocess.Popen]:
    """A process on this host that never ends by itself: what a hung trial runs, titled as
    Ray titles its workers (raywatch signals a trial's process only if it is one)."""
    process = subprocess.Popen(["ray::train.train", "600"], executable=shutil.which("sleep"))
    yield process
    process.kill()
    process.wait()


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A real local Ray cluster (random ports, never 6379) for the whole session."""
    where = tmp_path_factory.mktemp("ray")
    # A Ray temp dir of its own: a job submitted to this cluster resolves its driver's
    # address from the temp dir's ray_current_cluster, which every other cluster started
    # on the host (the demo's, `serve`'s, a second pytest run's) overwrites in /tmp/ray.
    temp_dir = Path(tempfile.mkdtemp(prefix="rwt-", dir="/tmp"))  # short: socket paths
    # No log monitor: nothing here reads a worker's output through its driver.
    local = LocalRay(where / "local-ray.json", num_cpus=2, temp_dir=temp_dir,
                     log_monitor=False)
    cluster = local.start(log_path=where / "local-ray.log")
    yield cluster
    local.stop()
    shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture
def ray_settings(settings, ray_cluster: LocalCluster) -> LocalCluster:  # type: ignore[no-untyped-def]
    """Point raywatch's Ray source at the test cluster."""
    settings.RAY_ADDRESS = None
    settings.RAY_API_SERVER_ADDRESS = ray_cluster.dashboard_url
    return ray_cluster


def port_flags(names: list[str], more: int = 0) -> tuple[list[str], list[int]]:
    """`ray start` flags `--name=PORT`, and `more` ports beside them: each port free and
    none given twice (picked at once: ports picked one by one can repeat)."""
    ports = free_ports(len(names) + more)
    return [f"--{n}={p}" for n, p in zip(names, ports, strict=False)], ports[len(names):]


def worker_ports(slot: int) -> list[str]:
    """`ray start` flags for a worker port range of 41 ports below the ephemeral range
    (32768+) that free_port() and outgoing connections draw from, and away from the
    default 10002-19999 the session's head uses. `slot` (0-7) keeps one process's
    extra Ray nodes apart; the pid keeps this run apart from the SQLite rerun."""
    low = 20000 + ((os.getpid() % 25) * 8 + slot % 8) * 60
    return [f"--min-worker-port={low}", f"--max-worker-port={low + 40}"]


@pytest.fixture
def add_worker_node(ray_cluster: LocalCluster, tmp_path: Path
                    ) -> Iterator[Callable[..., subprocess.Popen]]:
    """Start extra Ray nodes on this host (`ray start --block`, own ports); stopped after.
    What `ray start` prints goes to a file: `search_said(process)` tells it."""
    started: list[subprocess.Popen] = []

    def start(num_cpus: int = 1, hostname: str | None = None,
              node_ip: str | None = None) -> subprocess.Popen:
        """`hostname`: the node's own host name (a UTS namespace of its own, as root), so
        that it is another host to raywatch; `node_ip`: e.g. 127.0.0.2."""
        ray_bin = str(Path(sys.executable).parent / "ray")
        ports = [
            "dashboard-agent-listen-port", "dashboard-agent-grpc-port", "metrics-export-port",
            "runtime-env-agent-port", "node-manager-port", "object-manager-port",
        ]
        cmd = [ray_bin, "start", "--address", ray_cluster.gcs_address, "--block",
               f"--num-cpus={num_cpus}", "--disable-usage-stats",
               *worker_ports(4 + len(started)), *port_flags(ports)[0]]
        if node_ip:
            cmd.append(f"--node-ip-address={node_ip}")
        if hostname:
            cmd = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', hostname, *cmd]
        for attempt in range(3):
            said = tmp_path / f"ray-start-{len(started)}-{attempt}.log"
            with said.open("wb") as sink:
                process = subprocess.Popen(
                    cmd, start_new_session=True, stdout=sink, stderr=subprocess.STDOUT,
                    env={**os.environ, "RAY_AUTH_MODE": "token"},
                )
            process.said = said  # type: ignore[attr-defined]
            if not _gave_up_joining(process, said):
                break
        started.append(process)
        return process

    yield start
    for process in started:
        stop_ray_start(process)


def _gave_up_joining(process: subprocess.Popen, said: Path, timeout_s: float = 60) -> bool:
    """Whether `ray start` gave up: its raylet waits 30 s at most for the GCS to list it
    (ray/_private/node.py, raylet_start_wait_time_s, not configurable), which a machine
    running the whole suite can miss ("RPC error: Deadline Exceeded"). The node is
    started again then; anything else is the test's to see."""
    deadline = time.monotonic() + patient(timeout_s)
    while time.monotonic() < deadline:
        text = said.read_text(errors="replace")
        if "Ray runtime started" in text:
            return False
        if process.poll() is not None:
            return "timed out during startup" in text
        time.sleep(0.2)
    return False


def stop_node(process: subprocess.Popen, timeout_s: float = 40) -> None:
    """Stop a process started in a session of its own (a Tune driver): SIGTERM to its
    whole group, SIGKILL to the group if it is still there after `timeout_s`."""
    _stop(process, lambda: os.killpg(process.pid, signal.SIGTERM), timeout_s)


def stop_ray_start(process: subprocess.Popen, timeout_s: float = 40) -> None:
    """Stop a `ray start --block`: SIGTERM to `ray start` alone, which stops its processes
    in order; sent to the whole group, the raylet or GCS dies first and `ray start` waits
    out its drain (and a raylet is left running for a minute)."""
    _stop(process, lambda: process.send_signal(signal.SIGTERM), timeout_s)


def _stop(process: subprocess.Popen, terminate: Callable[[], None], timeout_s: float) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout_s)
    with contextlib.suppress(ProcessLookupError):  # the group's leftovers, or all of it
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def wait_for(predicate: Callable[[], object], timeout_s: float = 30, every_s: float = 0.2,
             what: str = "condition", explain: Callable[[], object] | None = None) -> object:
    """`predicate()`'s first true value, asked every `every_s`; an AssertionError once
    `timeout_s` (as on a quick machine: the run's PATIENCE stretches it) has passed."""
    deadline = time.monotonic() + patient(timeout_s)
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            seen = f"; state: {explain()}" if explain else ""
            raise AssertionError(f"timed out after {patient(timeout_s):g} s ({timeout_s} s x "
                                 f"patience {patient(1):g}) waiting for {what}{seen}")
        time.sleep(every_s)


# --- an ASGI server (HTTP + websockets) in this process ------------------------------------
class LiveServer:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # serve's own uvicorn: a stop ends agents' long-polls at once instead of waiting
        # them out (up to 25 s) while the thread holds the test database; a test's page
        # or socket still open then is cut after a short grace.
        self.server = stopping.Server("127.0.0.1", self.port, grace_s=0.5)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> LiveServer:
        # A fresh channel layer for each server's event loop: channels_redis keeps asyncio
        # locks in the layer, bound to the loop that first used them, and the previous
        # server's loop may not have let go of them yet.
        channel_layers.backends.clear()
        self.thread.start()
        wait_for(lambda: self.server.started, 20, 0.05, "the ASGI server to start")
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def live_server_asgi(transactional_db: None) -> Iterator[LiveServer]:
    server = LiveServer().start()
    yield server
    server.stop()


# --- Chromium through Playwright -----------------------------------------------------------
def off_the_loop(fn: Callable[..., Any], *args: Any) -> Any:
    """Call `fn` in a thread of its own. Playwright's sync API keeps an event loop in
    this one, and the push sent after commit (async_to_sync) will not run beside it."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = fn(*args)
        except BaseException as exc:  # handed back to the test
            outcome["error"] = exc
        finally:
            db_connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")



@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    # Module scope: Playwright's sync API keeps an event loop running in the main
    # thread while it is open, which sync Django code in later modules must not see.
    from playwright.sync_api import sync_playwright

    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


def browser_context(browser, **options: Any):  # type: ignore[no-untyped-def]
    """A new context whose clicks, fills and page loads wait as this run allows
    (Playwright's own 30 s, stretched by the run's patience)."""
    context = browser.new_context(**options)
    context.set_default_timeout(ms(30))
    return context


@pytest.fixture
def page(browser):  # type: ignore[no-untyped-def]
    context = browser_context(browser, viewport={"width": 1400, "height": 900})
    page = context.new_page()
    yield page
    context.close()


def login(page, server: LiveServer, user: User, next_path: str = "/cluster/") -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{server.url}/login/?next={next_path}")
    page.fill("input[name=username]", user.username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{server.url}{next_path}")


# --- a real Tune search watched by raywatch's collectors ------------------------------------
# Once a second, as `serve` polls in the end-to-end tests (tests/served.py QUICK): each
# poll costs the test's process and Ray's dashboard some 50 CPU ms, and twice as often
# made no test more telling.
POLL_S = 1.0
STALL_MIN_S = 6.0


def start_search(
    cluster: LocalCluster, storage: Path, name: str, scenario: str
) -> subprocess.Popen:
    """A Tune driver running `scenario` as search `name`; what it prints goes to a file
    beside `storage`, which `search_said` shows when a wait on it times out."""
    said = storage.parent / f"{name}-driver.log"
    with said.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.tune_scripts.search", cluster.gcs_address,
             str(storage), name, scenario],
            cwd=Path(__file__).resolve().parent.parent, stdout=sink, stderr=subprocess.STDOUT,
            env={**os.environ, "RAY_AUTH_MODE": "token"}, start_new_session=True,
        )
    process.said = said  # type: ignore[attr-defined]
    return process


def search_said(process: subprocess.Popen, tail: int = 3000) -> str:
    """The end of what a driver from `start_search` (or a node from `add_worker_node`)
    printed, and whether it still runs."""
    said = getattr(process, "said", None)
    text = said.read_text(errors="replace")[-tail:] if said and said.exists() else ""
    return f"driver {'running' if process.poll() is None else f'exited {process.returncode}'}" \
        f", it printed: {text!r}"


@pytest.fixture
def watched(settings, ray_settings, tmp_path):  # type: ignore[no-untyped-def]
    """raywatch's collectors polling the test cluster and a fresh Tune storage dir."""
    storage = tmp_path / "ray_results"
    storage.mkdir()
    settings.LOG_DIRS = [str(storage), str(Path(ray_settings.session_dir) / "artifacts")]
    settings.POLL_LOGS_S = settings.POLL_RAY_S = POLL_S
    settings.STALL_MIN_S = STALL_MIN_S
    settings.GONE_GRACE_S = 3.0
    scheduler = EmbeddedScheduler(celery_app, {
        "ray": {"task": "dashboard.cluster.tasks.poll_ray_state", "schedule": POLL_S},
        "logs": {"task": "dashboard.trials.tasks.poll_trial_logs", "schedule": POLL_S},
    })
    scheduler.start()
    yield storage
    scheduler.stop()




@pytest.fixture
def fake_gpus(settings):  # type: ignore[no-untyped-def]
    """The NVML source pointed at tests/fake_pynvml.py (no GPU on this machine), as the
    agent of node `gpu-node-1` at 10.0.0.5; the fake starts with no GPUs."""
    from collectors.nvml import shutdown_nvml
    from tests import fake_pynvml

    settings.GPU_SOURCE = "nvml"
    settings.NVML_MODULE = "tests.fake_pynvml"
    settings.NODE_NAME = "gpu-node-1"
    settings.NODE_IP = "10.0.0.5"
    shutdown_nvml(fake_pynvml)
    fake_pynvml.reset()
    yield fake_pynvml
    shutdown_nvml(fake_pynvml)
    fake_pynvml.reset()


def mark_ray_current(at=None) -> None:  # type: ignore[no-untyped-def]
    """Record a good Ray poll now, as the Ray collector would: its view is current."""
    from django.utils import timezone

    from dashboard.core.health import record

    record("ray", "", 2.0, 1.0, None, [])
    if at is not None:
        from dashboard.core.models import SourceHealth

        SourceHealth.objects.filter(source="ray", scope="").update(last_success_at=at)
    return timezone.now()


# --- loopback webhook receivers for the alert tests ------------------------------------------
@pytest.fixture
def receivers() -> Iterator[Callable[..., Receiver]]:
    started: list[Receiver] = []

    def start(*script: object) -> Receiver:
        receiver = Receiver(script=list(script) or [200]).start()
        started.append(receiver)
        return receiver

    yield start
    for receiver in started:
        receiver.stop()


@pytest.fixture
def alert_settings(settings):  # type: ignore[no-untyped-def]
    """Receivers live on loopback: open the private-address guard for them. Short
    timeouts and backoff so retries happen within a test."""
    settings.WEBHOOK_ALLOW_PRIVATE = True
    settings.ALERT_GROUP_WAIT_S = 0
    settings.NOTIFY_TIMEOUT_S = 1.0
    settings.NOTIFY_BACKOFF_S = 0.05
    settings.NOTIFY_BACKOFF_CAP_S = 0.2
    settings.BASE_URL = "https://raywatch.example.org"
    return settings
