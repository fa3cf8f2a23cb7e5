"""An agent's commands long-poll waits on its node's wake-up channel with one receive,
kept across its rechecks, never two at a time. channels_redis's receive() assumes one
receiver per channel: a second one, started while a cancelled one was still ending (its
Redis read closing its connection), had its buffer deleted under it, raised KeyError when
cancelled in turn (a traceback in serve's log at a stop), and could leave the layer's
receive lock held, which stops every page's pushes in that process."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections import Counter
from typing import Any

import pytest
from channels.layers import InMemoryChannelLayer
from channels_redis.core import RedisChannelLayer
from django.utils import timezone

from dashboard.agents import api, tokens
from dashboard.agents import commands as agent_commands
from dashboard.settings import redis_layer_host

pytestmark = pytest.mark.django_db(transaction=True)
DEADLINE_S = 60
CANCEL_ENDS_S = 0.05  # channels_redis closes its Redis connection when a read is cancelled


class Counted:
    """A real channel layer whose receives are counted per channel; a cancelled one ends
    CANCEL_ENDS_S later, as a cancelled Redis read does."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.running: Counter[str] = Counter()
        self.started = 0
        self.most = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.layer, name)

    async def receive(self, channel: str) -> Any:
        self.running[channel] += 1
        self.started += 1
        self.most = max(self.most, self.running[channel])
        try:
            return await self.layer.receive(channel)
        finally:
            try:
                await asyncio.sleep(CANCEL_ENDS_S)
            finally:
                self.running[channel] -= 1


def layers() -> list[Any]:
    found = [pytest.param(InMemoryChannelLayer, id="in-memory")]
    if os.environ.get("REDIS_URL"):
        found.append(pytest.param(lambda: RedisChannelLayer(
            hosts=[redis_layer_host(os.environ["REDIS_URL"])],
            prefix=f"wait-{uuid.uuid4().hex[:6]}"), id="redis"))
    return found


@pytest.mark.parametrize("make_layer", layers())
def test_a_long_poll_keeps_one_receive_across_its_rechecks(make_layer, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    layer = Counted(make_layer())
    monkeypatch.setattr(api, "get_channel_layer", lambda: layer)
    monkeypatch.setattr(api, "RECHECK_S", 0.1)
    token, _ = tokens.issue("gpu-a", None, timezone.now())

    async def waits() -> tuple[list, float]:
        began = time.monotonic()
        found = await api._wait_for_commands(token, began + 1.5)  # fifteen rechecks
        return found, time.monotonic() - began

    found, took = asyncio.run(waits())
    assert found == [] and took >= 1.5
    assert layer.most == 1, f"{layer.most} receives at once on one channel"
    # One Redis read for the whole long-poll, not a cancelled one at every recheck.
    assert layer.started == 1, f"{layer.started} receives for one long-poll"


@pytest.mark.parametrize("make_layer", layers())
def test_a_wake_up_hands_the_command_out_at_once(make_layer, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    layer = Counted(make_layer())
    monkeypatch.setattr(api, "get_channel_layer", lambda: layer)
    monkeypatch.setattr("dashboard.core.push.get_channel_layer", lambda: layer)
    monkeypatch.setattr(api, "RECHECK_S", 120.0)  # only the wake-up ends the wait early
    token, _ = tokens.issue("gpu-a", None, timezone.now())

    async def waits() -> tuple[list, float]:
        began = time.monotonic()
        waiting = asyncio.ensure_future(api._wait_for_commands(token, began + DEADLINE_S))
        await asyncio.sleep(0.5)
        created = await api.on_pool(agent_commands.create_signal)(
            None, "gpu-a", 4242, "SIGTERM", 1.0, timezone.now())
        found = await waiting
        assert [c["id"] for c in found] == [created.pk]
        return found, time.monotonic() - began

    _, took = asyncio.run(waits())
    # Without the wake-up, the command is found only by the look at the deadline.
    assert took < DEADLINE_S, f"handed out at the long-poll's deadline ({took:.1f} s)"
