"""raywatch settings: every value comes from the environment (docs/settings.md).

Embedded default: with no DATABASE_URL and no REDIS_URL raywatch runs on
SQLite (WAL), the in-memory channel layer and an in-process scheduler. With
both set it runs on Postgres, channels-redis and Celery worker/beat. A
malformed value stops the start with a message that names the variable.

docs/settings.md is generated from this file (dashboard/settingsdoc.py, `make
settings-doc`): the comment right above the line that names a variable is its
description there, a `# default: ...` line says how to show a default computed at
start, and each `# --- title (docs/page.md) ---` comment opens a section. Defaults the
node agent shares are written once, in collectors/defaults.py.
"""

from __future__ import annotations

import secrets
import warnings
from datetime import timedelta
from pathlib import Path

import dj_database_url

from collectors import defaults, rootfiles
from dashboard.envconf import (
    ConfigError,
    env_bool,
    env_choice,
    env_int,
    env_list,
    env_networks,
    env_number,
    env_secret,
    env_str,
    env_url,
    env_url_with_password,
)

# --- the server: its data, secret key and host names (docs/deploying.md) ------------------
BASE_DIR = Path(__file__).resolve().parent.parent
# Where raywatch keeps its SQLite file, its generated secret key and the local cluster's info.
# default: `.raywatch/` in the checkout
DATA_DIR = Path(env_str("RAYWATCH_DATA_DIR", str(BASE_DIR / ".raywatch"))).expanduser()


def _embedded_secret_key() -> str:
    """A key kept in DATA_DIR, so sessions survive restarts of a single-host install."""
    path = DATA_DIR / "secret_key"
    if path.exists():
        return path.read_text().strip()
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    path.write_text(key)
    path.chmod(0o600)
    return key


# Django's debug pages: never in production.
DEBUG = env_bool("RAYWATCH_DEBUG", False)
# Django's secret key: sessions, signed cookies, and (unless RAYWATCH_AGENT_COMMAND_SECRET
# is set) the seal on the agents' command keys.
# default: generated once into `RAYWATCH_DATA_DIR/secret_key`
SECRET_KEY = env_secret("RAYWATCH_SECRET_KEY") or _embedded_secret_key()
# The host names raywatch serves, comma-separated; also the websocket Origin check.
ALLOWED_HOSTS = env_list("RAYWATCH_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
# Origins trusted for forms posted over HTTPS, e.g. https://raywatch.example.com.
CSRF_TRUSTED_ORIGINS = env_list("RAYWATCH_CSRF_TRUSTED_ORIGINS", [])
# raywatch's own address as its users reach it: where links in alert messages point.
BASE_URL = env_str("RAYWATCH_BASE_URL", "http://127.0.0.1:8000")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    "knox",  # API tokens, stored hashed, with an expiry
    "drf_spectacular",
    "dashboard.core",
    "dashboard.cluster",
    "dashboard.gpus",
    "dashboard.trials",
    "dashboard.incidents",
    "dashboard.alerts",
    "dashboard.actions",
    "dashboard.agents",
    "dashboard.triage",
    "dashboard.metrics",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "dashboard.core.middleware.RefuseNulInUrl",
    "dashboard.core.middleware.StaticFiles",  # WhiteNoise, async-capable
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "dashboard.urls"
WSGI_APPLICATION = "dashboard.wsgi.application"
ASGI_APPLICATION = "dashboard.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "dashboard.core.context_processors.raywatch",
                "dashboard.cluster.scope.switcher",
            ],
        },
    },
]

# --- database (docs/deploying.md) ---------------------------------------------------------
# The database: postgres://user:pass@host:5432/db (or sqlite:///PATH). Its password may
# come apart, in RAYWATCH_DATABASE_PASSWORD.
# default: SQLite in `RAYWATCH_DATA_DIR`
DATABASE_URL = env_url_with_password("DATABASE_URL", ("postgres", "postgresql", "sqlite"),
                                     # DATABASE_URL's password (a Docker secret: its _FILE),
                                     # put into the URL, so the URL itself holds no secret.
                                     # default: the password in `DATABASE_URL`, if any
                                     "RAYWATCH_DATABASE_PASSWORD")
# SQLite, the default or from DATABASE_URL: WAL lets the web process read while the
# in-process scheduler writes; writers wait for each other (timeout) and take the write
# lock when a transaction begins, so none fails with "database is locked" half-way.
SQLITE_OPTIONS = {
    "timeout": 20,
    "transaction_mode": "IMMEDIATE",
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}
if DATABASE_URL:
    _db = dj_database_url.parse(
        DATABASE_URL,
        # Seconds a database connection is kept open for the next request (0: one each).
        conn_max_age=env_int("RAYWATCH_DB_CONN_MAX_AGE", 60, minimum=0),
        conn_health_checks=True,
    )
    if _db["ENGINE"] == "django.db.backends.postgresql":
        # Seconds to connect to Postgres: fail fast with a clear error instead of hanging
        # on an unreachable server.
        _db.setdefault("OPTIONS", {})["connect_timeout"] = env_int(
            "RAYWATCH_DB_CONNECT_TIMEOUT_S", 5, minimum=1
        )
    else:
        _db["OPTIONS"] = {**SQLITE_OPTIONS, **_db.get("OPTIONS", {})}
else:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    # Tests get a file too (not Django's shared in-memory database, whose table locks
    # ignore the busy timeout): WAL and the busy timeout, as `make run` has them.
    _db = {"ENGINE": "django.db.backends.sqlite3", "NAME": DATA_DIR / "raywatch.sqlite3",
           "OPTIONS": SQLITE_OPTIONS, "TEST": {"NAME": str(DATA_DIR / "raywatch-test.sqlite3")}}
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- redis: channel layer and Celery (docs/deploying.md) ----------------------------------
# Redis, redis://host:6379/0: the channel layer (live pages), the failed-login counts and
# Celery's broker. Unset: the in-memory channel layer and the in-process scheduler.
# default: unset: in-memory layer, in-process scheduler
REDIS_URL = env_url_with_password("REDIS_URL", ("redis", "rediss", "unix"),
                                  # REDIS_URL's password (a Docker secret: its _FILE), put
                                  # into the URL, so the URL itself holds no secret.
                                  # default: the password in `REDIS_URL`, if any
                                  "RAYWATCH_REDIS_PASSWORD")
EMBEDDED = REDIS_URL is None


def redis_layer_host(url: str) -> dict[str, object]:
    """The channel layer's connection to Redis at `url`. A page's socket waits on Redis
    for its next message 5 s at a time (channels_redis: BZPOPMIN, brpop_timeout), and
    redis-py 8 stops reading after its socket_timeout, 5 s too by default: a page with
    nothing new for 5 s lost its socket ("Timeout reading from ..."). Reads may take
    three times that wait; a Redis that answers nothing for 15 s is taken for gone."""
    return {"address": url, "socket_timeout": 15, "socket_connect_timeout": 3}


if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [redis_layer_host(REDIS_URL)],
                # The prefix of the channel layer's keys in Redis.
                "prefix": env_str("RAYWATCH_CHANNEL_PREFIX", "raywatch"),
                "capacity": 1000,
                "expiry": 30,
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
# The cache counts failed logins: in Redis it is shared by every web process.
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "raywatch",
            "OPTIONS": {"socket_connect_timeout": 3, "socket_timeout": 3},
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_TASK_IGNORE_RESULT = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_LATE = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A poll that could not run in time is useless later: drop it rather than pile up.
CELERY_TASK_DEFAULT_EXPIRES = 30

# --- polling Ray and trial logs (docs/architecture.md) ----------------------------------
# Seconds between polls of Ray's state: nodes, actors, jobs, pending demand.
POLL_RAY_S = env_number("RAYWATCH_POLL_RAY_S", 2.0, minimum=0.2)
# Seconds between trial-log polls.
POLL_LOGS_S = env_number("RAYWATCH_POLL_LOGS_S", 2.0, minimum=0.2)
# The same schedule drives Celery beat and the embedded in-process scheduler.
CELERY_BEAT_SCHEDULE = {
    "poll-ray-state": {
        "task": "dashboard.cluster.tasks.poll_ray_state",
        "schedule": POLL_RAY_S,
        "options": {"expires": max(POLL_RAY_S * 2, 5)},
    },
    "poll-trial-logs": {
        "task": "dashboard.trials.tasks.poll_trial_logs",
        "schedule": POLL_LOGS_S,
        "options": {"expires": max(POLL_LOGS_S * 2, 5)},
    },
}

# --- GPUs: read by each node's agent (docs/agents.md) --------------------------------------
# Seconds between GPU polls of each node's agent (raywatch's own host's too: `serve`
# starts it with raywatch's settings).
POLL_GPU_S = env_number("RAYWATCH_POLL_GPU_S", defaults.POLL_GPU_S, minimum=0.2)
# What reads the GPUs. nvml: the real nvidia-ml-py; simulated: invented GPUs for a demo,
# labelled SIMULATED everywhere; off: no GPU source on this process.
GPU_SOURCE = env_choice("RAYWATCH_GPU_SOURCE", defaults.GPU_SOURCES, defaults.GPU_SOURCE)
# The module the NVML source imports: the boundary where tests put a fake.
NVML_MODULE = env_str("RAYWATCH_NVML_MODULE", defaults.NVML_MODULE)
# The name raywatch's own host's agent reports under (its token is issued for it); a
# node agent's must match its token's node.
NODE_NAME = env_str("RAYWATCH_NODE_NAME")  # default: this host's name
# The address this host's GPUs are reported under: overrides the address Ray would pick.
NODE_IP = env_str("RAYWATCH_NODE_IP")  # default: the address Ray would pick

# --- GPU history: retention -------------------------------------------------------------
# Hours raw GPU samples are kept; charts wider than ~33 hours read the rollups.
RAW_RETENTION_H = env_number("RAYWATCH_RAW_RETENTION_H", 48.0, minimum=1)
# Days the per-minute rollups of GPU samples (min, mean, max) are kept.
ROLLUP_RETENTION_D = env_number("RAYWATCH_ROLLUP_RETENTION_D", 30.0, minimum=1)
# Rows per delete batch when pruning: short transactions, no table lock.
RETENTION_BATCH = env_int("RAYWATCH_RETENTION_BATCH", 20_000, minimum=100)

# --- resource detectors: GPUs and Ray (docs/detectors.md) ---------------------------------
# Seconds between runs of the resource detectors.
DETECT_S = env_number("RAYWATCH_DETECT_S", 5.0, minimum=0.2)
# gpu_idle_during_step: every GPU a running trial's (or job's) processes hold has been
# under IDLE_GPU_PERCENT for this many seconds, with no result meanwhile.
IDLE_GPU_S = env_number("RAYWATCH_IDLE_GPU_S", 300.0, minimum=0)
# gpu_idle_during_step: the utilization (%) under which a GPU counts as idle.
IDLE_GPU_PERCENT = env_number("RAYWATCH_IDLE_GPU_PERCENT", 5.0, minimum=0)
# An idle-GPU-during-a-step incident stays open across steps until its work has gone this
# long without idling through one, or stops (dashboard/gpus/detect.still_idle).
IDLE_GPU_CLEAR_S = env_number("RAYWATCH_IDLE_GPU_CLEAR_S", 300.0, minimum=0)
# gpu_memory_high: a GPU's memory is over this percentage for GPU_MEMORY_HIGH_S.
GPU_MEMORY_HIGH_PERCENT = env_number("RAYWATCH_GPU_MEMORY_HIGH_PERCENT", 95.0, minimum=1)
# gpu_memory_high: seconds a GPU's memory must stay over GPU_MEMORY_HIGH_PERCENT.
GPU_MEMORY_HIGH_S = env_number("RAYWATCH_GPU_MEMORY_HIGH_S", 300.0, minimum=0)
# gpu_orphan_memory: seconds a process may hold GPU memory while belonging to no live Ray
# worker, actor or job driver before it is flagged.
ORPHAN_GRACE_S = env_number("RAYWATCH_ORPHAN_GRACE_S", 60.0, minimum=0)
# demand_pending: seconds an actor, task shape or placement group that could fit has
# waited behind other work before it is flagged (naming what holds the resources). A
# search's trials queued behind its own running trials are not flagged.
PENDING_S = env_number("RAYWATCH_PENDING_S", 120.0, minimum=0)
# demand_infeasible: Ray says "infeasible" at once: alert after this short grace (against
# flapping), not after PENDING_S.
INFEASIBLE_GRACE_S = env_number("RAYWATCH_INFEASIBLE_GRACE_S", 5.0, minimum=0)
# object_store_spilling: a node's spilled bytes grew within this many seconds.
SPILL_WINDOW_S = env_number("RAYWATCH_SPILL_WINDOW_S", 300.0, minimum=1)
# node_dead: a Ray node that died within this many hours is flagged.
NODE_DEAD_KEEP_H = env_number("RAYWATCH_NODE_DEAD_KEEP_H", 24.0, minimum=0)
# call_overdue: a Ray task or actor call (`AutoRewardManager.compute_reward`) running this
# many times its name's usual duration (the median of its last calls raywatch saw end)...
CALL_OVERDUE_FACTOR = env_number("RAYWATCH_CALL_OVERDUE_FACTOR", 5.0, minimum=1)
# ...and at least this many seconds is flagged, naming the call, its actor, node and pid.
# A Tune trial silent this far past its usual step has its stacks sampled by its node's
# agent: hung, it is stalled then, before STALL_MIN_S.
CALL_OVERDUE_MIN_S = env_number("RAYWATCH_CALL_OVERDUE_MIN_S", 30.0, minimum=0)
# How many ended calls of each name, in each Ray job, raywatch keeps the durations of.
CALL_HISTORY = env_int("RAYWATCH_CALL_HISTORY", 20, minimum=1)
# How many a name needs before its usual duration counts: a name seen end fewer times
# (a trainer's one long `Runner.run`) is never overdue.
CALL_MIN_HISTORY = env_int("RAYWATCH_CALL_MIN_HISTORY", 2, minimum=1)

CELERY_BEAT_SCHEDULE.update({
    "detect-resources": {
        "task": "dashboard.gpus.tasks.detect_resources",
        "schedule": DETECT_S,
        "options": {"expires": max(DETECT_S * 2, 5)},
    },
    "gpu-retention": {
        "task": "dashboard.gpus.tasks.roll_up_and_prune",
        "schedule": 60.0,
        "options": {"expires": 120},
    },
    "cluster-retention": {
        "task": "dashboard.cluster.tasks.forget_ended_clusters",
        "schedule": 3600.0,
        "options": {"expires": 3600},
    },
})

# --- Ray (docs/clusters.md) --------------------------------------------------------------
# The Ray cluster to watch: its dashboard URL (http://HEAD:8265) or its GCS address
# (HEAD:PORT), as Ray itself accepts.
# default: unset: `make run` starts a local cluster
RAY_ADDRESS = env_str("RAY_ADDRESS")
# The Ray dashboard's URL; overrides the one RAY_ADDRESS gives, as in Ray.
RAY_API_SERVER_ADDRESS = env_url("RAY_API_SERVER_ADDRESS", ("http", "https"))
# Ray's auth token, for a cluster started with token auth.
# default: read from `RAY_AUTH_TOKEN_PATH`
RAY_AUTH_TOKEN = env_secret("RAY_AUTH_TOKEN")
# The file holding Ray's auth token when RAY_AUTH_TOKEN is unset.
# default: `~/.ray/auth_token`
RAY_AUTH_TOKEN_PATH = env_str("RAY_AUTH_TOKEN_PATH", str(Path.home() / ".ray" / "auth_token"))
# Seconds each request to Ray may take.
RAY_HTTP_TIMEOUT_S = env_number("RAYWATCH_RAY_TIMEOUT_S", 10.0, minimum=0.5)
# The GCS (HOST:PORT), for killing trial actors (unnamed ones have no other way).
# default: `RAY_ADDRESS` when it is HOST:PORT, else the local cluster `make run` started
RAY_GCS_ADDRESS = env_str("RAY_GCS_ADDRESS")
# Where `make run` records the local cluster it started when RAY_ADDRESS is unset.
LOCAL_RAY_FILE = DATA_DIR / "local-ray.json"
if RAY_ADDRESS and RAY_ADDRESS.lower() in {"auto", "local"}:
    raise ConfigError(
        f"RAY_ADDRESS={RAY_ADDRESS!r}: give the head node's address explicitly "
        "(http://HEAD:8265 or HEAD:PORT); leave it unset to start a local cluster"
    )

# --- trial logs (docs/trial-logs.md) -------------------------------------------------------
# Whether raywatch reads trial log dirs on its own host (the node agent's collector, run
# in raywatch's process; its cursors in RAYWATCH_DATA_DIR/trial-log-reader). On: the
# embedded default, where Ray, Tune and raywatch share a host. Off (docker-compose): node
# agents read each node's dirs and send them (docs/agents.md); detection runs either way.
CENTRAL_LOGS = env_bool("RAYWATCH_CENTRAL_LOGS", True)
# Colon-separated roots holding Tune experiments or TensorBoard runs; empty means
# ~/ray_results plus every local Ray session's live driver_artifacts staging directories
# (fresher than the storage copy).
LOG_DIRS = env_list("RAYWATCH_LOG_DIRS", [], sep=":")
# A finished trial's directory unchanged this many seconds is no longer checked every
# poll; the slow rescan still visits it (for what mtimes miss).
LOG_QUIET_S = env_number("RAYWATCH_LOG_QUIET_S", defaults.LOG_QUIET_S, minimum=0)
# Seconds the slow rescan takes to visit every quiet trial directory once.
LOG_RESCAN_S = env_number("RAYWATCH_LOG_RESCAN_S", defaults.LOG_RESCAN_S, minimum=1)
# The most quiet trial dirs the slow rescan checks in one poll: a larger history takes a
# longer lap (100,000 dirs at a 2 s poll: 33 min) and the poll's cost stays flat.
LOG_RESCAN_PER_POLL = env_int("RAYWATCH_LOG_RESCAN_PER_POLL", defaults.LOG_RESCAN_PER_POLL,
                              minimum=1)
# The largest log file read, in MiB: larger is refused, as its trial's problem. A
# result.json or event file is read in pieces (so are the heads of error.txt and tuner.pkl).
LOG_FILE_MAX_MB = env_int("RAYWATCH_LOG_FILE_MAX_MB", rootfiles.LOG_FILE_MAX_MB, minimum=1)
# The largest experiment_state-*.json read, in MiB: parsed whole, in memory; a larger
# one is refused, as its experiment's problem. (A params.json over 1 MiB is refused
# whatever this says: a config parsed whole takes some 45 times its size.)
LOG_JSON_FILE_MAX_MB = env_int("RAYWATCH_LOG_JSON_FILE_MAX_MB", rootfiles.JSON_FILE_MAX_MB,
                               minimum=1)
# The Ray temp dir whose sessions' live driver_artifacts are read.
RAY_TMP_DIR = Path(env_str("RAYWATCH_RAY_TMP_DIR", defaults.RAY_TMP_DIR))

# --- trial detectors (docs/detectors.md) ---------------------------------------------------
# Comma-separated globs: the metrics that are phase timings (step_time_regression names
# the slow phase).
# verl and EasyR1 write timing_s/*, OpenRLHF train/timing/* (docs/trial-logs.md).
TIMING_KEYS = env_list("RAYWATCH_TIMING_KEYS", ["timing_s/*", "timing/*", "time/*", "*_time_s",
                                                "train/timing/*"])
# trial_stalled: no result for longer than max(STALL_MIN_S, STALL_FACTOR x the trial's
# median step interval) while its process is alive (sooner when its stacks say hung:
# CALL_OVERDUE_*). In seconds: the backstop for processes no agent can sample.
STALL_MIN_S = env_number("RAYWATCH_STALL_MIN_S", 120.0, minimum=1)
# trial_stalled: how many median step intervals without a result make a stall.
STALL_FACTOR = env_number("RAYWATCH_STALL_FACTOR", 5.0, minimum=1)
# step_time_regression: a step (or a phase of it) slower than this many times its usual
# time.
SLOW_FACTOR = env_number("RAYWATCH_SLOW_FACTOR", 3.0, minimum=1)
# Slow = over SLOW_FACTOR x the usual time AND over it by SLOW_MIN_EXCESS_S, for SLOW_FOR_S.
SLOW_MIN_EXCESS_S = env_number("RAYWATCH_SLOW_MIN_EXCESS_S", 2.0, minimum=0)
# step_time_regression opens only once the trial has been slow this many seconds (like
# Alertmanager's `for:`), so scheduler jitter raises nothing.
SLOW_FOR_S = env_number("RAYWATCH_SLOW_FOR_S", 30.0, minimum=0)
# step_time_regression: "usual" is the median of the steps before the slowdown, within
# this many last steps.
SLOW_WINDOW = env_int("RAYWATCH_SLOW_WINDOW", 20, minimum=3)
# trial_process_gone: seconds no live actor has the trial's pid on its node (longer than
# Tune's state snapshot, so a trial Tune just stopped is not flagged).
GONE_GRACE_S = env_number("RAYWATCH_GONE_GRACE_S", 30.0, minimum=0)
# A failure (error.txt) older than this many hours when raywatch first reads it opens no
# incident (months of history on a first start); it still shows as ERROR.
ERRORED_RECENT_H = env_number("RAYWATCH_ERRORED_RECENT_H", 24.0, minimum=0)

# --- alerts: grouping, pacing and delivery (docs/alerts.md) --------------------------------
# Seconds between alert routing ticks (and one right after each commit).
ALERT_TICK_S = env_number("RAYWATCH_ALERT_TICK_S", 1.0, minimum=0.2)
# Seconds a new group waits so that incidents starting together go out in one message.
# The defaults of these three are Alertmanager's.
ALERT_GROUP_WAIT_S = env_number("RAYWATCH_ALERT_GROUP_WAIT_S", 30.0, minimum=0)
# Seconds a group's next message waits after its previous one.
ALERT_GROUP_INTERVAL_S = env_number("RAYWATCH_ALERT_GROUP_INTERVAL_S", 300.0, minimum=0)
# Seconds between reminders of a group still firing unacknowledged.
ALERT_REPEAT_S = env_number("RAYWATCH_ALERT_REPEAT_S", 4 * 3600.0, minimum=1)
# Seconds each webhook request may take.
NOTIFY_TIMEOUT_S = env_number("RAYWATCH_NOTIFY_TIMEOUT_S", 10.0, minimum=0.5)
# Webhook retries: how many tries in all before a message is given up.
NOTIFY_MAX_ATTEMPTS = env_int("RAYWATCH_NOTIFY_MAX_ATTEMPTS", 10, minimum=1)
# Webhook retries: the first wait, in seconds, doubling each try.
NOTIFY_BACKOFF_S = env_number("RAYWATCH_NOTIFY_BACKOFF_S", 2.0, minimum=0.05)
# Webhook retries: the longest wait, in seconds.
NOTIFY_BACKOFF_CAP_S = env_number("RAYWATCH_NOTIFY_BACKOFF_CAP_S", 300.0, minimum=0.1)
# Sending threads (in the notifier, or in-process on the embedded default).
NOTIFY_THREADS = env_int("RAYWATCH_NOTIFY_THREADS", 8, minimum=1)
# Webhooks to loopback, link-local and private addresses are refused unless this is set.
WEBHOOK_ALLOW_PRIVATE = env_bool("RAYWATCH_WEBHOOK_ALLOW_PRIVATE", False)
CELERY_BEAT_SCHEDULE["route-alerts"] = {
    "task": "dashboard.alerts.tasks.route_alerts",
    "schedule": ALERT_TICK_S,
    "options": {"expires": max(ALERT_TICK_S * 5, 5)},
}
# Sending has its own queue and worker (`celery worker -Q notify`, `serve`'s notifier): a
# webhook that hangs never holds a collector's slot. Actions run there too. Named once here
# (docker-compose.yml's notifier names it on its command line).
NOTIFY_QUEUE = "notify"
CELERY_TASK_ROUTES = {"dashboard.alerts.tasks.send_channel": {"queue": NOTIFY_QUEUE}}

# --- actions: terminate trials, stop jobs, kill GPU processes (docs/actions.md) -----------
# Seconds between SIGTERM and the forced kill.
TERMINATE_GRACE_S = env_number("RAYWATCH_TERMINATE_GRACE_S", 20.0, minimum=0)
# After the forced kill, how long to wait for the process to be gone before failing.
FORCE_WAIT_S = env_number("RAYWATCH_FORCE_WAIT_S", 10.0, minimum=1)
# Each user may start at most ACTION_RATE actions per ACTION_RATE_WINDOW_S.
ACTION_RATE = env_int("RAYWATCH_ACTION_RATE", 10, minimum=1)
# The window, in seconds, of ACTION_RATE.
ACTION_RATE_WINDOW_S = env_number("RAYWATCH_ACTION_RATE_WINDOW_S", 60.0, minimum=1)
CELERY_TASK_ROUTES["dashboard.actions.tasks.run_action"] = {"queue": NOTIFY_QUEUE}
# An action no executor took within this long fails, with nothing signalled (a worker that
# was down must not act late on a target that has moved on); one taken and not finished
# within its own deadline (dashboard/actions/settle.py) fails as lost, so its target can
# be acted on again.
ACTION_QUEUE_S = env_number("RAYWATCH_ACTION_QUEUE_S", 30.0, minimum=1)
CELERY_BEAT_SCHEDULE["settle-actions"] = {
    "task": "dashboard.actions.tasks.settle_actions", "schedule": 10.0,
    "options": {"expires": 20}}

# --- where a stalled trial hangs: its Python stack (docs/detectors.md) ----------------------
# Seconds a stalled trial's stack may take: Ray's /worker/traceback, or py-spy on the
# node's agent (its own 10 s) and its answer.
STACK_TIMEOUT_S = env_number("RAYWATCH_STACK_TIMEOUT_S", 10.0, minimum=1)
# A stack asked for and not answered within this long is shown as failed, and may be asked again.
STACK_GIVE_UP_S = env_number("RAYWATCH_STACK_GIVE_UP_S", 90.0, minimum=10)
# Stacks are taken on a queue and worker of their own (`celery worker -Q stacks`, `serve`'s
# stack taker; on the embedded default, threads of their own): each waits seconds on an
# agent, and a burst of them (many calls overdue at once) must not hold up an operator's
# terminate or an alert on the notifier. Named once here (docker-compose.yml's stacks
# service names it on its command line).
STACKS_QUEUE = "stacks"
CELERY_TASK_ROUTES["dashboard.trials.tasks.take_trial_stack"] = {"queue": STACKS_QUEUE}
CELERY_TASK_ROUTES["dashboard.agents.tasks.take_call_stack"] = {"queue": STACKS_QUEUE}
# Days stacks (a stalled trial's, an overdue call's) and the agents' commands that took
# them are kept; a trial's newest stack stays whatever its age.
STACKS_KEEP_D = env_number("RAYWATCH_STACKS_KEEP_D", 7.0, minimum=1)
CELERY_BEAT_SCHEDULE["stacks-retention"] = {
    "task": "dashboard.agents.tasks.prune_stacks", "schedule": 3600.0,
    "options": {"expires": 3600}}
# Threads that take stacks at once (the stacks worker's, or the embedded pool's).
STACK_THREADS = env_int("RAYWATCH_STACK_THREADS", 8, minimum=1)
# Overdue calls whose stacks are asked for, at most, per node and minute (each is
# sampled 3 times): 10,000 calls overdue at once cost their nodes' agents a bounded
# amount; the others are asked in the minutes after, one job's first call before
# another's second.
CALL_STACKS_PER_NODE_MIN = env_int("RAYWATCH_CALL_STACKS_PER_NODE_MIN", 12, minimum=1)

# --- node agents over HTTP (docs/agents.md, docs/agent-protocol.md) ------------------------
# An agent not heard from this long is not sent commands (an action uses another way) and
# shows "agent stale" on the Cluster page.
AGENT_STALE_S = env_number("RAYWATCH_AGENT_STALE_S", 30.0, minimum=1)
# A command not fetched by its node's agent within this long is never handed out.
AGENT_COMMAND_TTL_S = env_number("RAYWATCH_AGENT_COMMAND_TTL_S", 30.0, minimum=1)
# Seals each node token's command key in the database (dashboard/agents/sealing.py), so a
# copy of the database alone signs no command. Changing it: every token must be rotated
# before its agent takes commands again.
AGENT_COMMAND_SECRET = env_secret("RAYWATCH_AGENT_COMMAND_SECRET") or SECRET_KEY
# A rotated node token keeps working this long beside the new one, then stops.
AGENT_TOKEN_OVERLAP_S = env_number("RAYWATCH_AGENT_TOKEN_OVERLAP_S", 3600.0, minimum=0)
# Variables of serve's environment that its host's agent is given besides the agent's own
# settings and the system's (PATH, HOME, locale, proxies): say a shim that
# RAYWATCH_NVML_MODULE names reads one of its own. Nothing else of serve's environment
# (its database URL, secret key, SSO secret) reaches the agent.
AGENT_PASS_ENV = env_list("RAYWATCH_AGENT_PASS_ENV", [])
# A GPU is its node's while that node's agent reported it within this many hours: another
# node's agent reporting the same GPU UUID is refused meanwhile; after it, the GPU moves
# (a card moved, a node renamed or rebuilt).
GPU_OWNER_HOLD_H = env_number("RAYWATCH_GPU_OWNER_HOLD_H", 24.0, minimum=0)
# A node token stops working this many days after it was issued (0: never).
AGENT_TOKEN_EXPIRES_DAYS = env_number("RAYWATCH_AGENT_TOKEN_EXPIRES_DAYS", 0.0, minimum=0)
# Reports held at once per web process (waiting for their group's transaction, or in
# it: dashboard/agents/together.py); past it an agent is told 503 + Retry-After. A waiting
# report holds only its decoded body; 512 nodes at 1 Hz hold ~50 (gpu_reports_bench.py).
AGENT_REPORT_SLOTS = env_int("RAYWATCH_AGENT_REPORT_SLOTS", 256, minimum=1)
# Reports a second a web process aims for: hearing from more agents than this, it asks
# each (`send_s` in a report's answer) to gather agents / this many seconds before a
# report (512 agents: 5.2 s), at most AGENT_SEND_MAX_S. An agent's RAYWATCH_AGENT_SEND_S
# overrides it (dashboard/agents/pacing.py).
AGENT_REPORTS_PER_S = env_number("RAYWATCH_AGENT_REPORTS_PER_S", 100.0, minimum=0.01)
# The longest raywatch asks agents to gather before a report (0: it never asks), at most
# half of AGENT_STALE_S; past it, add web processes.
# default: `10`, or half of `RAYWATCH_AGENT_STALE_S` when that is less
AGENT_SEND_MAX_S = env_number("RAYWATCH_AGENT_SEND_MAX_S", min(10.0, AGENT_STALE_S / 2),
                              minimum=0)
if AGENT_SEND_MAX_S > AGENT_STALE_S / 2:
    raise ConfigError(
        f"RAYWATCH_AGENT_SEND_MAX_S={AGENT_SEND_MAX_S:g}: at most half of "
        f"RAYWATCH_AGENT_STALE_S ({AGENT_STALE_S:g}), or agents that follow it look stale")

# --- the cluster (docs/clusters.md) ------------------------------------------------------
# The name of the cluster RAY_ADDRESS points at: the Cluster page, its sessions, alerts and
# the `cluster` label of every /metrics series. Set it before the first start: rows are
# stored under the cluster of that name, and a later change starts a new one.
CLUSTER_NAME = env_str("RAYWATCH_CLUSTER_NAME", "default")
# A cluster that has not answered for this long is marked ended (head lost or torn down);
# before that it is unreachable. Everything stored of it stays.
CLUSTER_ENDED_S = env_number("RAYWATCH_CLUSTER_ENDED_S", 1800.0, minimum=1)
# An ended cluster (and everything stored of it) is deleted this many days after it ended;
# 0 keeps ended clusters for ever. `manage.py cluster keep NAME DAYS` sets one cluster's.
ENDED_CLUSTER_KEEP_D = env_int("RAYWATCH_ENDED_CLUSTER_KEEP_D", 90, minimum=0)
# A cluster its head node's agent announces: "admin" waits for an admin to approve it
# (manage.py cluster approve, POST /api/clusters/NAME/approve) before polling it; "auto"
# polls it at once.
CLUSTERS_APPROVE = env_choice("RAYWATCH_CLUSTERS_APPROVE", ("admin", "auto"), "admin")

# --- Prometheus export: /metrics (docs/prometheus.md) -------------------------------------
# Set: /metrics wants `Authorization: Bearer <token>` from anywhere (401 otherwise). Unset:
# it answers only to clients whose address is in METRICS_ALLOW.
METRICS_TOKEN = env_secret("RAYWATCH_METRICS_TOKEN")
# Without a token, /metrics answers only these addresses or networks (403 otherwise).
METRICS_ALLOW = env_networks("RAYWATCH_METRICS_ALLOW", ["127.0.0.1/32", "::1/128"])

# --- source health ----------------------------------------------------------------
# A source shows "down" once its last good poll is older than this many poll intervals
# (failed polls in a row).
HEALTH_DOWN_AFTER_FAILURES = env_int("RAYWATCH_HEALTH_DOWN_AFTER", 3, minimum=1)

# --- logins and sessions (docs/api.md) --------------------------------------------------
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
SESSION_COOKIE_HTTPONLY = True
# Secure session and CSRF cookies (served behind HTTPS); also the default of
# RAYWATCH_SSL_REDIRECT and RAYWATCH_HSTS_SECONDS.
SESSION_COOKIE_SECURE = env_bool("RAYWATCH_SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
# A local account's password (set in the admin pages, `createsuperuser`, `changepassword`):
# at least 12 characters, not like the username, not a common one, not all digits.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
     "OPTIONS": {"min_length": 12}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    # First: refuses every login path (the login page, the admin's) while a username or
    # an address is over its failed-login budget; dashboard/core/login.py counts.
    "dashboard.core.login.FailedLoginGuard",
    "django.contrib.auth.backends.ModelBackend",
]
# Failed logins for one username from one address: a stranger guessing the admin's
# password from elsewhere does not lock the admin out.
LOGIN_FAILURES_PER_USER = env_int("RAYWATCH_LOGIN_FAILURES_PER_USER", 5, minimum=1)
# Higher than per user: people behind one NAT or proxy share an address.
LOGIN_FAILURES_PER_ADDRESS = env_int("RAYWATCH_LOGIN_FAILURES_PER_ADDRESS", 20, minimum=1)
# Failed logins for one username from every address together (guesses spread over many
# addresses): past it only a browser that logged in as that user before gets through.
LOGIN_FAILURES_PER_USER_ANYWHERE = env_int("RAYWATCH_LOGIN_FAILURES_PER_USER_ANYWHERE", 100,
                                           minimum=1)
# Seconds in which failed logins are counted; past a limit, that address is told "try
# again in N s" (429).
LOGIN_FAILURE_WINDOW_S = env_int("RAYWATCH_LOGIN_FAILURE_WINDOW_S", 300, minimum=1)
# How long a browser is remembered as one that logged in as its user (a signed cookie).
LOGIN_KNOWN_BROWSER_DAYS = env_int("RAYWATCH_LOGIN_KNOWN_BROWSER_DAYS", 90, minimum=1)
# An open live-update socket checks its session and its user's role again this often
# (and at once when raywatch hears its user changed or logged out): one that may no
# longer see the pages closes (dashboard/core/consumers.py).
SOCKET_RECHECK_S = env_number("RAYWATCH_SOCKET_RECHECK_S", 30.0, minimum=0.1)

# --- HTTPS (docs/deploying.md) ------------------------------------------------------------
# Secure cookies say raywatch is served over HTTPS, so by default plain HTTP is then
# redirected there and browsers are told to stay on HTTPS (HSTS). Behind a proxy that
# terminates TLS, raywatch learns the scheme and the client's address from
# X-Forwarded-Proto/-For, trusted only from RAYWATCH_TRUSTED_PROXIES (uvicorn applies them).

# Addresses or networks whose X-Forwarded-Proto/-For are believed (the client's scheme and
# address): the proxies in front of raywatch.
TRUSTED_PROXIES = env_list("RAYWATCH_TRUSTED_PROXIES", ["127.0.0.1", "::1"])
# Redirect plain HTTP to HTTPS (not the probes: /healthz, /metrics).
SECURE_SSL_REDIRECT = env_bool("RAYWATCH_SSL_REDIRECT", SESSION_COOKIE_SECURE)
# Probes and scrapers from inside (compose, load balancers, Prometheus) use HTTP. A redirect
# would not protect /metrics' token: the scraper has sent it by the time it is redirected.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
# HSTS max-age: browsers refuse plain HTTP to this host for this many seconds.
SECURE_HSTS_SECONDS = env_int(
    "RAYWATCH_HSTS_SECONDS", 365 * 86400 if SESSION_COOKIE_SECURE else 0, minimum=0)
# HSTS for this host's subdomains too.
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("RAYWATCH_HSTS_INCLUDE_SUBDOMAINS", True)
# HSTS preload: a promise for the whole registered domain, for its owner to make.
SECURE_HSTS_PRELOAD = env_bool("RAYWATCH_HSTS_PRELOAD", False)
if SECURE_HSTS_SECONDS and not SECURE_HSTS_PRELOAD:
    # Preload asks browsers to hard-code HTTPS for the whole registrable domain: a
    # promise for its owner to make (RAYWATCH_HSTS_PRELOAD=1), not for one host's dashboard.
    SILENCED_SYSTEM_CHECKS = ["security.W021"]
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

# --- the API (docs/api.md) ----------------------------------------------------------------
# An API token (`manage.py drf_create_token USER [--days N]`) stops working this many days
# after it was made. raywatch keeps only its hash (django-rest-knox: SHA-512).
API_TOKEN_DAYS = env_int("RAYWATCH_API_TOKEN_DAYS", 90, minimum=1)
REST_KNOX = {
    "TOKEN_TTL": timedelta(days=API_TOKEN_DAYS),
    "AUTH_HEADER_PREFIX": "Token",  # `Authorization: Token KEY`, as before
    "AUTO_REFRESH": False,  # a token in use still ends: a leaked one does not live for ever
}
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "knox.auth.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["dashboard.core.roles.IsViewer"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # ApiError (a refusal with its reason and status) answered like DRF's own errors.
    "EXCEPTION_HANDLER": "dashboard.core.errors.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "raywatch API",
    "DESCRIPTION": "Live state of Ray clusters: nodes, GPUs, trials, incidents, actions.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["dashboard.core.roles.IsViewer"],
}

# --- static files -------------------------------------------------------------------
STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns when it is missing
# Plotly.js comes from static/vendor/ (its basic bundle: scatter and bar are all the
# charts draw), never a CDN: clusters are often air-gapped.
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = True
# Hashed names and gzip copies from `collectstatic` (make run runs it): served compressed,
# cached for good. Without it, the plain files from the sources (dashboard/core/staticstorage.py).
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "dashboard.core.staticstorage.StaticStorage"},
}
# Only the hashed copies are kept (and compressed) in STATIC_ROOT: the plain names are
# served from the sources.
WHITENOISE_KEEP_ONLY_HASHED_FILES = True
# WhiteNoise serves files through a sync iterator; under ASGI Django warns on each one.
warnings.filterwarnings("ignore", message="StreamingHttpResponse must consume synchronous")

# --- pages and logs (docs/pages.md) --------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
# How pages show times: utc ("2026-11-23 15:41:55 UTC · 3 min ago"), or local (the
# viewer's browser's time zone, named). Stored and sent times are UTC either way.
TIME_DISPLAY = env_choice("RAYWATCH_TIME_DISPLAY", ("utc", "local"), "utc")
USE_I18N = False
USE_TZ = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    # The log level (Python's logging: WARNING shows less, INFO is the default's).
    "root": {"handlers": ["console"], "level": env_str("RAYWATCH_LOG_LEVEL", "INFO")},
    "loggers": {"django.channels.server": {"level": "WARNING"}},
}

# --- `manage.py serve` (make run: docs/running.md) -------------------------------------
# The address `manage.py serve` (make run) listens on.
SERVE_HOST = env_str("HOST", "127.0.0.1")
# The port `manage.py serve` (make run) listens on.
SERVE_PORT = env_int("PORT", 8000, minimum=1)
# CPUs of the local Ray cluster `make run` starts when RAY_ADDRESS is unset (0: all).
LOCAL_RAY_NUM_CPUS = env_int("RAYWATCH_LOCAL_RAY_CPUS", 0, minimum=0) or None
