"""raywatch settings: every value comes from the environment (see README).

Embedded default: with no DATABASE_URL and no REDIS_URL raywatch runs on
SQLite (WAL), the in-memory channel layer and an in-process scheduler. With
both set it runs on Postgres, channels-redis and Celery worker/beat. A
malformed value stops the start with a message that names the variable.
"""

from __future__ import annotations

import secrets
import warnings
from datetime import timedelta
from pathlib import Path

import dj_database_url

from collectors import rootfiles
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

BASE_DIR = Path(__file__).resolve().parent.parent
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


DEBUG = env_bool("RAYWATCH_DEBUG", False)
SECRET_KEY = env_secret("RAYWATCH_SECRET_KEY") or _embedded_secret_key()
ALLOWED_HOSTS = env_list("RAYWATCH_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("RAYWATCH_CSRF_TRUSTED_ORIGINS", [])
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

# --- database -----------------------------------------------------------------
# The password may come apart (RAYWATCH_DATABASE_PASSWORD or its _FILE, a Docker secret).
DATABASE_URL = env_url_with_password("DATABASE_URL", ("postgres", "postgresql", "sqlite"),
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
        conn_max_age=env_int("RAYWATCH_DB_CONN_MAX_AGE", 60, minimum=0),
        conn_health_checks=True,
    )
    if _db["ENGINE"] == "django.db.backends.postgresql":
        # Fail fast with a clear error instead of hanging on an unreachable server.
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

# --- redis: channel layer and Celery --------------------------------------------
REDIS_URL = env_url_with_password("REDIS_URL", ("redis", "rediss", "unix"),
                                  "RAYWATCH_REDIS_PASSWORD")
EMBEDDED = REDIS_URL is None
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [REDIS_URL],
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

POLL_RAY_S = env_number("RAYWATCH_POLL_RAY_S", 2.0, minimum=0.2)
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

# --- GPUs: NVML agents (README: "GPU agents") --------------------------------------
# Each GPU node runs an agent (`manage.py agent`: a Celery worker on its own queue);
# beat's dispatcher sends every registered agent a poll each POLL_GPU_S.
POLL_GPU_S = env_number("RAYWATCH_POLL_GPU_S", 1.0, minimum=0.2)
# nvml: the real nvidia-ml-py; simulated: invented GPUs for a demo, labelled SIMULATED
# everywhere; off: no GPU source on this process.
GPU_SOURCE = env_choice("RAYWATCH_GPU_SOURCE", ("nvml", "simulated", "off"), "nvml")
# The module the NVML source imports: the boundary where tests put a fake.
NVML_MODULE = env_str("RAYWATCH_NVML_MODULE", "pynvml")
NODE_NAME = env_str("RAYWATCH_NODE_NAME")  # default: this host's name
NODE_IP = env_str("RAYWATCH_NODE_IP")  # default: the address Ray would pick
AGENT_FORGET_S = env_number("RAYWATCH_AGENT_FORGET_S", 600.0, minimum=10)
RAW_RETENTION_H = env_number("RAYWATCH_RAW_RETENTION_H", 48.0, minimum=1)
ROLLUP_RETENTION_D = env_number("RAYWATCH_ROLLUP_RETENTION_D", 30.0, minimum=1)
RETENTION_BATCH = env_int("RAYWATCH_RETENTION_BATCH", 20_000, minimum=100)
DETECT_S = env_number("RAYWATCH_DETECT_S", 5.0, minimum=0.2)
IDLE_GPU_S = env_number("RAYWATCH_IDLE_GPU_S", 300.0, minimum=0)
IDLE_GPU_PERCENT = env_number("RAYWATCH_IDLE_GPU_PERCENT", 5.0, minimum=0)
# An idle-GPU-during-a-step incident stays open across steps until its work has gone this
# long without idling through one (dashboard/gpus/detect.still_idle).
IDLE_GPU_CLEAR_S = env_number("RAYWATCH_IDLE_GPU_CLEAR_S", 300.0, minimum=0)
GPU_MEMORY_HIGH_PERCENT = env_number("RAYWATCH_GPU_MEMORY_HIGH_PERCENT", 95.0, minimum=1)
GPU_MEMORY_HIGH_S = env_number("RAYWATCH_GPU_MEMORY_HIGH_S", 300.0, minimum=0)
ORPHAN_GRACE_S = env_number("RAYWATCH_ORPHAN_GRACE_S", 60.0, minimum=0)
PENDING_S = env_number("RAYWATCH_PENDING_S", 120.0, minimum=0)
# Ray says "infeasible" at once: alert after this short grace, not after PENDING_S.
INFEASIBLE_GRACE_S = env_number("RAYWATCH_INFEASIBLE_GRACE_S", 5.0, minimum=0)
SPILL_WINDOW_S = env_number("RAYWATCH_SPILL_WINDOW_S", 300.0, minimum=1)
NODE_DEAD_KEEP_H = env_number("RAYWATCH_NODE_DEAD_KEEP_H", 24.0, minimum=0)

CELERY_BEAT_SCHEDULE.update({
    "dispatch-gpu-polls": {
        "task": "dashboard.gpus.tasks.dispatch_gpu_polls",
        "schedule": POLL_GPU_S,
        "options": {"expires": max(POLL_GPU_S * 5, 5)},
    },
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
# What the embedded scheduler runs in place of a beat task: with no agents, this
# process polls its own node's GPUs.
EMBEDDED_STANDINS = {"dashboard.gpus.tasks.dispatch_gpu_polls": "dashboard.gpus.tasks.poll_gpus"}

# --- Ray --------------------------------------------------------------------------
# RAY_ADDRESS: the dashboard URL (http://head:8265) or the GCS address (head:6379),
# as Ray itself accepts. RAY_API_SERVER_ADDRESS overrides the dashboard URL, as in Ray.
RAY_ADDRESS = env_str("RAY_ADDRESS")
RAY_API_SERVER_ADDRESS = env_url("RAY_API_SERVER_ADDRESS", ("http", "https"))
RAY_AUTH_TOKEN = env_secret("RAY_AUTH_TOKEN")
RAY_AUTH_TOKEN_PATH = env_str("RAY_AUTH_TOKEN_PATH", str(Path.home() / ".ray" / "auth_token"))
RAY_HTTP_TIMEOUT_S = env_number("RAYWATCH_RAY_TIMEOUT_S", 10.0, minimum=0.5)
# The GCS (HOST:PORT) for killing unnamed actors; default: RAY_ADDRESS when it is HOST:PORT,
# or the local cluster `make run` started.
RAY_GCS_ADDRESS = env_str("RAY_GCS_ADDRESS")
# Where `make run` records the local cluster it started when RAY_ADDRESS is unset.
LOCAL_RAY_FILE = DATA_DIR / "local-ray.json"
if RAY_ADDRESS and RAY_ADDRESS.lower() in {"auto", "local"}:
    raise ConfigError(
        f"RAY_ADDRESS={RAY_ADDRESS!r}: give the head node's address explicitly "
        "(http://HEAD:8265 or HEAD:PORT); leave it unset to start a local cluster"
    )

# --- trial logs and detectors (README: "Detectors") -----------------------------------
# Whether raywatch reads trial log dirs on its own host. On: the embedded default, where
# Ray, Tune and raywatch share a host. Off (docker-compose): node agents read each node's
# dirs and send them (README "Agents"); detection runs either way.
CENTRAL_LOGS = env_bool("RAYWATCH_CENTRAL_LOGS", True)
# Colon-separated roots; empty means ~/ray_results plus every local Ray session's live
# driver_artifacts staging directories (fresher than the storage copy).
LOG_DIRS = env_list("RAYWATCH_LOG_DIRS", [], sep=":")
# A finished trial's directory unchanged this long is no longer checked every poll; a slow
# rescan visits every such directory once per LOG_RESCAN_S (for what mtimes miss), but at
# most LOG_RESCAN_PER_POLL of them a poll: a larger history takes a longer lap.
LOG_QUIET_S = env_number("RAYWATCH_LOG_QUIET_S", 60.0, minimum=0)
LOG_RESCAN_S = env_number("RAYWATCH_LOG_RESCAN_S", 300.0, minimum=1)
LOG_RESCAN_PER_POLL = env_int("RAYWATCH_LOG_RESCAN_PER_POLL", 100, minimum=1)
# The largest log file read, in MiB: larger is refused, as its trial's problem. A
# result.json or event file is read in pieces (so are the heads of error.txt and tuner.pkl);
# params.json and experiment_state-*.json are parsed whole, in memory.
LOG_FILE_MAX_MB = env_int("RAYWATCH_LOG_FILE_MAX_MB", rootfiles.LOG_FILE_MAX_MB, minimum=1)
LOG_JSON_FILE_MAX_MB = env_int("RAYWATCH_LOG_JSON_FILE_MAX_MB", rootfiles.JSON_FILE_MAX_MB,
                               minimum=1)
RAY_TMP_DIR = Path(env_str("RAYWATCH_RAY_TMP_DIR", "/tmp/ray"))
TIMING_KEYS = env_list("RAYWATCH_TIMING_KEYS", ["timing_s/*", "timing/*", "time/*", "*_time_s"])
STALL_MIN_S = env_number("RAYWATCH_STALL_MIN_S", 120.0, minimum=1)
STALL_FACTOR = env_number("RAYWATCH_STALL_FACTOR", 5.0, minimum=1)
SLOW_FACTOR = env_number("RAYWATCH_SLOW_FACTOR", 3.0, minimum=1)
# Slow = over SLOW_FACTOR x the usual time AND over it by SLOW_MIN_EXCESS_S, for SLOW_FOR_S.
SLOW_MIN_EXCESS_S = env_number("RAYWATCH_SLOW_MIN_EXCESS_S", 2.0, minimum=0)
SLOW_FOR_S = env_number("RAYWATCH_SLOW_FOR_S", 30.0, minimum=0)
SLOW_WINDOW = env_int("RAYWATCH_SLOW_WINDOW", 20, minimum=3)
GONE_GRACE_S = env_number("RAYWATCH_GONE_GRACE_S", 30.0, minimum=0)
# A failure (error.txt) older than this when raywatch first reads it opens no incident.
ERRORED_RECENT_H = env_number("RAYWATCH_ERRORED_RECENT_H", 24.0, minimum=0)

# --- alerts: grouping, pacing and delivery (README: "Alerts") ------------------------------
ALERT_TICK_S = env_number("RAYWATCH_ALERT_TICK_S", 1.0, minimum=0.2)
# Alertmanager's defaults: wait 30 s for incidents that start together, then at most one
# message per group each 5 min, and a reminder every 4 h while it still fires.
ALERT_GROUP_WAIT_S = env_number("RAYWATCH_ALERT_GROUP_WAIT_S", 30.0, minimum=0)
ALERT_GROUP_INTERVAL_S = env_number("RAYWATCH_ALERT_GROUP_INTERVAL_S", 300.0, minimum=0)
ALERT_REPEAT_S = env_number("RAYWATCH_ALERT_REPEAT_S", 4 * 3600.0, minimum=1)
NOTIFY_TIMEOUT_S = env_number("RAYWATCH_NOTIFY_TIMEOUT_S", 10.0, minimum=0.5)
NOTIFY_MAX_ATTEMPTS = env_int("RAYWATCH_NOTIFY_MAX_ATTEMPTS", 10, minimum=1)
NOTIFY_BACKOFF_S = env_number("RAYWATCH_NOTIFY_BACKOFF_S", 2.0, minimum=0.05)
NOTIFY_BACKOFF_CAP_S = env_number("RAYWATCH_NOTIFY_BACKOFF_CAP_S", 300.0, minimum=0.1)
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

# --- actions: terminate trials, stop jobs, kill GPU processes (README: "Actions") -------
TERMINATE_GRACE_S = env_number("RAYWATCH_TERMINATE_GRACE_S", 20.0, minimum=0)
# After the forced kill, how long to wait for the process to be gone before failing.
FORCE_WAIT_S = env_number("RAYWATCH_FORCE_WAIT_S", 10.0, minimum=1)
# Each user may start at most ACTION_RATE actions per ACTION_RATE_WINDOW_S.
ACTION_RATE = env_int("RAYWATCH_ACTION_RATE", 10, minimum=1)
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

# --- where a stalled trial hangs: its Python stack (README: "Detectors") ---------------------
# py-spy for processes on raywatch's own host; unset: the one beside Python, else on PATH.
PY_SPY = env_str("RAYWATCH_PY_SPY")
STACK_TIMEOUT_S = env_number("RAYWATCH_STACK_TIMEOUT_S", 10.0, minimum=1)
# A stack asked for and not answered within this long is shown as failed, and may be asked again.
STACK_GIVE_UP_S = env_number("RAYWATCH_STACK_GIVE_UP_S", 90.0, minimum=10)
CELERY_TASK_ROUTES["dashboard.trials.tasks.take_trial_stack"] = {"queue": NOTIFY_QUEUE}
# The GPU dispatcher is quick and must not wait behind the collectors' polls: on a busy
# worker its few seconds of expiry ran out in the queue, poll after poll, and no GPU was read.
CELERY_TASK_ROUTES["dashboard.gpus.tasks.dispatch_gpu_polls"] = {"queue": NOTIFY_QUEUE}

# --- node agents over HTTP (docs/agent-protocol.md) ----------------------------------------
# An agent not heard from this long is not sent commands (an action uses another way).
AGENT_STALE_S = env_number("RAYWATCH_AGENT_STALE_S", 30.0, minimum=1)
# A command not fetched by its node's agent within this long is never handed out.
AGENT_COMMAND_TTL_S = env_number("RAYWATCH_AGENT_COMMAND_TTL_S", 30.0, minimum=1)
# Seals each node token's command key in the database (dashboard/agents/sealing.py), so a
# copy of the database alone signs no command. Changing it: every token must be rotated
# before its agent takes commands again.
AGENT_COMMAND_SECRET = env_secret("RAYWATCH_AGENT_COMMAND_SECRET") or SECRET_KEY
# A rotated node token keeps working this long beside the new one, then stops.
AGENT_TOKEN_OVERLAP_S = env_number("RAYWATCH_AGENT_TOKEN_OVERLAP_S", 3600.0, minimum=0)
# A node token stops working this many days after it was issued (0: never).
AGENT_TOKEN_EXPIRES_DAYS = env_number("RAYWATCH_AGENT_TOKEN_EXPIRES_DAYS", 0.0, minimum=0)
# Reports held at once per web process (waiting for their group's transaction, or in
# it: dashboard/agents/together.py); past it an agent is told 503 + Retry-After. A waiting
# report holds only its decoded body; 512 nodes at 1 Hz hold ~50 (gpu_reports_bench.py).
AGENT_REPORT_SLOTS = env_int("RAYWATCH_AGENT_REPORT_SLOTS", 256, minimum=1)
# Reports a second a web process aims for: hearing from more agents than this, it asks
# each (`send_s` in a report's answer) to gather agents / this many seconds before a
# report, at most AGENT_SEND_MAX_S (default 10, or half of AGENT_STALE_S when that is
# less; 0: never asks). An agent's RAYWATCH_AGENT_SEND_S
# overrides it (dashboard/agents/pacing.py).
AGENT_REPORTS_PER_S = env_number("RAYWATCH_AGENT_REPORTS_PER_S", 100.0, minimum=0.01)
AGENT_SEND_MAX_S = env_number("RAYWATCH_AGENT_SEND_MAX_S", min(10.0, AGENT_STALE_S / 2),
                              minimum=0)
if AGENT_SEND_MAX_S > AGENT_STALE_S / 2:
    raise ConfigError(
        f"RAYWATCH_AGENT_SEND_MAX_S={AGENT_SEND_MAX_S:g}: at most half of "
        f"RAYWATCH_AGENT_STALE_S ({AGENT_STALE_S:g}), or agents that follow it look stale")

# --- the cluster (README: "Clusters and sessions") --------------------------------------------
# The name of the cluster RAY_ADDRESS points at: the Cluster page, its sessions, and the
# `cluster` label of every /metrics series.
CLUSTER_NAME = env_str("RAYWATCH_CLUSTER_NAME", "default")
# A cluster that has not answered for this long is marked ended (head lost or torn down);
# before that it is unreachable. Everything stored of it stays.
CLUSTER_ENDED_S = env_number("RAYWATCH_CLUSTER_ENDED_S", 1800.0, minimum=1)
# A cluster its head node's agent announces: "admin" waits for an admin to approve it
# (manage.py cluster approve, POST /api/clusters/NAME/approve) before polling it; "auto"
# polls it at once.
# An ended cluster (and everything stored of it) is deleted this many days after it ended;
# 0 keeps ended clusters for ever. `manage.py cluster keep NAME DAYS` sets one cluster's.
ENDED_CLUSTER_KEEP_D = env_int("RAYWATCH_ENDED_CLUSTER_KEEP_D", 90, minimum=0)
CLUSTERS_APPROVE = env_choice("RAYWATCH_CLUSTERS_APPROVE", ("admin", "auto"), "admin")

# --- Prometheus export: /metrics (README: "Prometheus and Grafana") --------------------------
# Set: /metrics wants `Authorization: Bearer <token>` from anywhere. Unset: it answers only
# to clients whose address is in METRICS_ALLOW.
METRICS_TOKEN = env_secret("RAYWATCH_METRICS_TOKEN")
METRICS_ALLOW = env_networks("RAYWATCH_METRICS_ALLOW", ["127.0.0.1/32", "::1/128"])

# --- source health ----------------------------------------------------------------
# A source whose last good poll is older than this many poll intervals is "down".
HEALTH_DOWN_AFTER_FAILURES = env_int("RAYWATCH_HEALTH_DOWN_AFTER", 3, minimum=1)

# --- auth -------------------------------------------------------------------------
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env_bool("RAYWATCH_SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
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
LOGIN_FAILURE_WINDOW_S = env_int("RAYWATCH_LOGIN_FAILURE_WINDOW_S", 300, minimum=1)
# How long a browser is remembered as one that logged in as its user (a signed cookie).
LOGIN_KNOWN_BROWSER_DAYS = env_int("RAYWATCH_LOGIN_KNOWN_BROWSER_DAYS", 90, minimum=1)
# An open live-update socket checks its session and its user's role again this often
# (and at once when raywatch hears its user changed or logged out): one that may no
# longer see the pages closes (dashboard/core/consumers.py).
SOCKET_RECHECK_S = env_number("RAYWATCH_SOCKET_RECHECK_S", 30.0, minimum=0.1)

# --- HTTPS (README: "Deploying with docker-compose") ------------------------------------
# Secure cookies say raywatch is served over HTTPS, so by default plain HTTP is then
# redirected there and browsers are told to stay on HTTPS (HSTS). Behind a proxy that
# terminates TLS, raywatch learns the scheme and the client's address from
# X-Forwarded-Proto/-For, trusted only from RAYWATCH_TRUSTED_PROXIES (uvicorn applies them).
TRUSTED_PROXIES = env_list("RAYWATCH_TRUSTED_PROXIES", ["127.0.0.1", "::1"])
SECURE_SSL_REDIRECT = env_bool("RAYWATCH_SSL_REDIRECT", SESSION_COOKIE_SECURE)
# Probes and scrapers from inside (compose, load balancers, Prometheus) use HTTP. A redirect
# would not protect /metrics' token: the scraper has sent it by the time it is redirected.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env_int(
    "RAYWATCH_HSTS_SECONDS", 365 * 86400 if SESSION_COOKIE_SECURE else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("RAYWATCH_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("RAYWATCH_HSTS_PRELOAD", False)
if SECURE_HSTS_SECONDS and not SECURE_HSTS_PRELOAD:
    # Preload asks browsers to hard-code HTTPS for the whole registrable domain: a
    # promise for its owner to make (RAYWATCH_HSTS_PRELOAD=1), not for one host's dashboard.
    SILENCED_SYSTEM_CHECKS = ["security.W021"]
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

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
STATICFILES_DIRS = [BASE_DIR / "static"]
# plotly.min.js is served from the plotly package itself: no CDN, works air-gapped.
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "dashboard.core.staticfinders.PlotlyFinder",
]
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
    "root": {"handlers": ["console"], "level": env_str("RAYWATCH_LOG_LEVEL", "INFO")},
    "loggers": {"django.channels.server": {"level": "WARNING"}},
}

# --- `manage.py serve` (make run) -----------------------------------------------------
SERVE_HOST = env_str("HOST", "127.0.0.1")
SERVE_PORT = env_int("PORT", 8000, minimum=1)
LOCAL_RAY_NUM_CPUS = env_int("RAYWATCH_LOCAL_RAY_CPUS", 0, minimum=0) or None
