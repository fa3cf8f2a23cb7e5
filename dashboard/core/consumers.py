"""The base of every page's websocket: auth, groups, current state on connect."""

from __future__ import annotations

import contextlib
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from dashboard.core.health import HEALTH_GROUP, health_payload
from dashboard.core.push import ACTIONS_GROUP, EVERY_PAGE, SCOPED
from dashboard.core.roles import VIEWER, has_role

CLOSE_FORBIDDEN = 4403


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """Joins `topics` (Channels groups) and sends each one's current state on connect.

    When the channel layer fails (Redis restarts) the consumer ends and the socket
    closes; the page reconnects with backoff and gets the current state again, so
    memberships Redis forgot never leave a page silently stale.

    Subclasses name their topics and build the snapshot. The status strip's
    `health` topic, actions' progress and what the apps registered in EVERY_PAGE (the
    header's incident count, `alerts`) are on every page.
    Nothing destructive travels here: the socket is read-only, actions are POSTs.
    """

    topics: tuple[str, ...] = ()
    # The cluster the page is scoped to (its name, from the socket's ?cluster=), or "":
    # all clusters. Pushed payloads of SCOPED topics are narrowed to it.
    cluster = ""

    def all_topics(self) -> tuple[str, ...]:
        return (HEALTH_GROUP, *EVERY_PAGE, ACTIONS_GROUP, *self.page_topics())

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
        await self.join_groups()
        await self.accept()
        # Joined first, read second: an update committed meanwhile arrives after.
        await self.send_snapshot()

    async def join_groups(self) -> None:
        for group in self.all_topics():
            await self.channel_layer.group_add(group, self.channel_name)

    async def send_snapshot(self) -> None:
        snapshot = await database_sync_to_async(self.snapshot)()
        for topic, data in snapshot.items():
            await self.send_json({"topic": topic, "data": data, "snapshot": True})

    async def disconnect(self, code: int) -> None:
        for group in self.all_topics():
            with contextlib.suppress(Exception):  # the layer is down: nothing to undo
                await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"topic": "pong", "data": content.get("t")})

    async def push(self, event: dict[str, Any]) -> None:
        await self.send_json({"topic": event["topic"], "data": await self.narrowed(event)})

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
