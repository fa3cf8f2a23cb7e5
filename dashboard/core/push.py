"""Live push: collectors publish to Channels groups only after the database commit.

The channel layer is at-most-once; pages therefore always re-read current state
on (re)connect, and nothing that must not be lost (alerts) relies on it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction
from rest_framework.utils.encoders import JSONEncoder

log = logging.getLogger(__name__)
T = TypeVar("T")

# The Channels groups, named once. Each group carries topics of the same name (and a few
# more: "points" to a trial's page, "deliveries" to the alerts group).
HEALTH_GROUP = "health"  # the status strip, on every page
ALERTS_GROUP = "alerts"  # the header's incident count, on every page; the alert pages
ACTIONS_GROUP = "actions"  # progress of terminate/stop/kill actions, on every page
CLUSTER_GROUP = "cluster"
DEMANDS_GROUP = "demands"
GPUS_GROUP = "gpus"
EXPERIMENTS_GROUP = "experiments"
JOBS_GROUP = "jobs"


def experiment_group(pk: int) -> str:
    return f"experiment-{pk}"


def trial_group(pk: int) -> str:
    return f"trial-{pk}"


def job_group(cluster_pk: int, job_id: str) -> str:
    """A Ray job's running calls: the page of the RL run whose trainer is in the job."""
    return f"job-{cluster_pk}-{job_id[:64]}"


def jsonable(data: Any) -> Any:
    """A payload as the API and the pages get it: through DRF's encoder (datetimes as
    ISO strings), and back."""
    return json.loads(json.dumps(data, cls=JSONEncoder))


def train_group(cluster_pk: int, job_id: str, run_dir: str) -> str:
    """A Ray Train run as Train's state API lists it: the page of the run of that name in
    that Ray job (its trial id, any text: hashed into a group name)."""
    key = f"{job_id}/{run_dir}".encode()
    return f"train-{cluster_pk}-{hashlib.sha1(key).hexdigest()[:16]}"


def user_group(pk: int) -> str:
    """Every socket of one user: told to check again that it may stay open."""
    return f"user-{pk}"


# The topic that tells a socket to check its session and role again (never sent on to
# the page): to a user's group when that user changed, to HEALTH_GROUP (every socket)
# when a role's group did. Its data may name a session that ended: {"ended": KEY}.
RECHECK = "recheck"


# What every page shows live besides its own topics, by group: the current state a page
# gets on connect. The app that owns it registers it in its AppConfig.ready(), so core
# serves the header without importing the apps above it.
EVERY_PAGE: dict[str, Callable[[], Any]] = {}

# Topics whose rows belong to clusters: how a page scoped to one cluster (the header's
# switcher) narrows a pushed payload to it, given the cluster's name. Registered by the
# app that owns the topic, as EVERY_PAGE is.
SCOPED: dict[str, Callable[[Any, str], Any]] = {}


def rows_in_cluster(rows: Any, name: str) -> Any:
    """The narrower of a payload that is a list of rows carrying "cluster"."""
    return [r for r in rows if isinstance(r, dict) and r.get("cluster") == name]


def publish(group: str, topic: str, data: Any) -> None:
    """Send `data` to every socket in `group` once the current transaction commits.

    `data` may be a callable that builds the payload then, from committed state. Inside
    `batch()`, the message waits for the batch's end and goes out with the others.
    """
    if _batches.stack:
        _batches.stack[-1].append((group, topic, data))
        return
    transaction.on_commit(lambda: send_now(group, topic, data), robust=True)


class _Batches(threading.local):
    def __init__(self) -> None:
        self.stack: list[list[tuple[str, str, Any]]] = []


_batches = _Batches()


@contextmanager
def batch() -> Iterator[None]:
    """Collect the messages published inside, then send them together once the current
    transaction commits: one trip to the channel layer instead of one per message
    (a report of 50 trials publishes 100 messages or more). A batch left by an error
    sends nothing, as its transaction commits nothing."""
    _batches.stack.append([])
    try:
        yield
    except BaseException:
        _batches.stack.pop()
        raise
    messages = _batches.stack.pop()
    if messages:
        transaction.on_commit(lambda: send_many(messages), robust=True)


SENDS_AT_ONCE = 16


class _Sender:
    """One event loop in a thread of its own, per process, for sending from synchronous
    code (Celery tasks, the embedded scheduler, views): the channel layer keeps its Redis
    connections per event loop, and async_to_sync outside a running loop makes a new loop,
    so a new connection, for every call (~1-2 ms a message; a 10,000-trial search pushes
    thousands a second)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid = 0

    def run(self, make: Callable[[], Awaitable[T]], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(make(), self._running()).result(timeout)

    def _running(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            # A forked child (Celery's prefork pool) inherits the object, not the thread.
            if (self._loop is None or self._pid != os.getpid() or self._thread is None
                    or not self._thread.is_alive()):
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                                name="raywatch-push")
                self._thread.start()
                self._pid = os.getpid()
            return self._loop


_sender = _Sender()


def send_now(group: str, topic: str, data: Any) -> bool:
    return send_many([(group, topic, data)]) == 1


def send_many(messages: list[tuple[str, str, Any]]) -> int:
    """Send each (group, topic, data) now, all of them in one call into the channel
    layer's event loop; how many went out. A failed send is logged and loses only itself."""
    layer = get_channel_layer()
    if layer is None:
        return 0
    built = [(group, {"type": "push", "topic": topic, "data": data() if callable(data) else data})
             for group, topic, data in messages]

    async def send_all() -> list[BaseException | None]:
        # At most SENDS_AT_ONCE in flight: the Redis layer's connection pool is bounded,
        # and a poll of 1,000 trials publishes 1,000 messages or more ("Too many
        # connections" lost every one past the pool's size).
        limit = asyncio.Semaphore(SENDS_AT_ONCE)

        async def send(group: str, message: dict[str, Any]) -> None:
            async with limit:
                await layer.group_send(group, message)

        return await asyncio.gather(*(send(group, message) for group, message in built),
                                    return_exceptions=True)

    try:
        if isinstance(layer, InMemoryChannelLayer):  # its queues live on the server's loop
            outcomes = async_to_sync(send_all)()
        else:
            outcomes = _sender.run(send_all)
    except Exception as exc:
        log.warning("live push of %d messages failed: %s", len(built), exc)
        return 0
    failed = [(group, o) for (group, _), o in zip(built, outcomes, strict=True)
              if isinstance(o, BaseException)]
    for group, exc in failed[:3]:
        log.warning("live push to %s failed: %s", group, exc)
    return len(built) - len(failed)
