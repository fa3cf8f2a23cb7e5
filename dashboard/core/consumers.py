"""The base of every page's websocket: auth, groups, current state on connect."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from importlib import import_module
from typing import Any
from urllib.parse import parse_qs

from channels.auth import get_user
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from dashboard.core.health import HEALTH_GROUP, health_payload
from dashboard.core.push import ACTIONS_GROUP, EVERY_PAGE, RECHECK, SCOPED, user_group
from dashboard.core.roles import VIEWER, has_role

log = logging.getLogger(__name__)
# Refused at connect, or closed later: no role (any more), logged out, deactivated. The
# page stops reconnecting and says "log in again".
CLOSE_FORBIDDEN = 4403
CLOSE_CANNOT_CHECK = 1011  # the check itself failed: the page reconnects and is checked


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """Joins `topics` (Channels groups) and sends each one's current state on connect.

    When the channel layer fails (Redis restarts) the consumer ends and the socket
    closes; the page reconnects with backoff and gets the current state again, so
    memberships Redis forgot never leave a page silently stale.

    Subclasses name their topics and build the snapshot. The status strip's
    `health` topic, actions' progress and what the apps registered in EVERY_PAGE (the
    header's incident count, `alerts`) are on every page.
    Nothing destructive travels here: the socket is read-only, actions are POSTs.

    Its user's session and role are checked at connect and again whenever raywatch
    hears that the user changed (core/rolechanges.py), and every SOCKET_RECHECK_S
    besides: a socket whose user lost the role, logged out or was deactivated closes.
    """

    topics: tuple[str, ...] = ()
    # The cluster the page is scoped to (its name, from the socket's ?cluster=), or "":
    # all clusters. Pushed payloads of SCOPED topics are narrowed to it.
    cluster = ""
    user_pk: int | None = None
    rechecks: asyncio.Task[None] | None = None

    def all_topics(self) -> tuple[str, ...]:
        mine = (user_group(self.user_pk),) if self.user_pk is not None else ()
        return (HEALTH_GROUP, *EVERY_PAGE, ACTIONS_GROUP, *mine, *self.page_topics())

    def page_topics(self) -> tuple[str, ...]:
        return self.topics

    def url_kwarg(self, name: str) -> str:
        return str(self.scope["url_route"]["kwargs"][name])

    async def connect(self) -> None:
        query = parse_qs((self.scope.get("query_string") or b"").decode("latin-1"))
        self.cluster = (query.get("cluster") or [""])[0][:200]
        user = self.scope.get("user")
        if not await database_sync_to_async(has_role)(user, VIEWER):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.user_pk = user.pk
        await self.join_groups()
        await self.accept()
        # Joined first, read second: an update committed meanwhile arrives after.
        await self.send_snapshot()
        self.rechecks = asyncio.get_running_loop().create_task(self.recheck_every())

    async def may_stay(self) -> bool:
        """Whether the socket's session still holds its user, and the user a role: read
        afresh from the session store and the database, as a new request would be."""
        session = self.scope.get("session")
        key = getattr(session, "session_key", None)
        if not key:
            return False
        fresh = import_module(settings.SESSION_ENGINE).SessionStore(key)
        user = await get_user({"session": fresh})
        return user.pk == self.user_pk and await database_sync_to_async(has_role)(user, VIEWER)

    async def recheck(self, ended: str | None = None) -> bool:
        """Close the socket unless it may stay; whether it stays."""
        session = self.scope.get("session")
        try:
            stays = ended != getattr(session, "session_key", None) and await self.may_stay()
        except Exception as exc:  # the database or session store is down: checked on return
            log.warning("cannot check a socket's session and role: %s", exc)
            await self.close(code=CLOSE_CANNOT_CHECK)
            return False
        if not stays:
            await self.close(code=CLOSE_FORBIDDEN)
        return stays

    async def recheck_every(self) -> None:
        while True:
            await asyncio.sleep(settings.SOCKET_RECHECK_S)
            if not await self.recheck():
                return

    async def join_groups(self) -> None:
        for group in self.all_topics():
            await self.channel_layer.group_add(group, self.channel_name)

    async def send_snapshot(self) -> None:
        snapshot = await database_sync_to_async(self.snapshot)()
        for topic, data in snapshot.items():
            await self.send_json({"topic": topic, "data": data, "snapshot": True})

    async def disconnect(self, code: int) -> None:
        if self.rechecks is not None:
            self.rechecks.cancel()
        for group in self.all_topics():
            with contextlib.suppress(Exception):  # the layer is down: nothing to undo
                await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"topic": "pong", "data": content.get("t")})

    async def push(self, event: dict[str, Any]) -> None:
        if await self.rechecked(event):
            return
        await self.send_json({"topic": event["topic"], "data": await self.narrowed(event)})

    async def rechecked(self, event: dict[str, Any]) -> bool:
        """Whether `event` was the one telling this socket to check again (handled)."""
        if event["topic"] != RECHECK:
            return False
        await self.recheck((event.get("data") or {}).get("ended"))
        return True

    async def narrowed(self, event: dict[str, Any]) -> Any:
        """A push's data as this page may see it: its cluster's rows when it is scoped."""
        data, narrow = event["data"], SCOPED.get(event["topic"])
        if self.cluster and narrow is not None:
            data = await database_sync_to_async(narrow)(data, self.cluster)
        return data

    def snapshot(self) -> dict[str, Any]:
        every_page = {group: current() for group, current in EVERY_PAGE.items()}
        return {"health": health_payload(), **every_page, **self.page_snapshot()}

    def page_snapshot(self) -> dict[str, Any]:
        return {}
