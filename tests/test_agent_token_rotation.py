"""Node tokens end. Rotating one issues the next (shown once) and the old one keeps
working for RAYWATCH_AGENT_TOKEN_OVERLAP_S while its agent is given the new one, then
stops: `manage.py agent_token --rotate` and the Agents page say until when. A token may
also expire (RAYWATCH_AGENT_TOKEN_EXPIRES_DAYS, or per token); an ended token is refused
with the reason, and no action goes through it."""

from __future__ import annotations

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from collectors.agent.client import call
from collectors.agent.wire import token_key
from dashboard.agents import tokens
from dashboard.agents.models import NodeToken
from dashboard.agents.remote import node_with_agent
from dashboard.core.errors import ApiError
from tests.conftest import LiveServer, wait_for

NODE = "gpu-node-8"


def hello(url: str, token: str) -> tuple[int, str]:
    reply = call("GET", f"{url}/api/agent/v1/hello", token)
    return reply.status, reply.detail


@pytest.mark.django_db(transaction=True)
def test_a_rotated_token_works_for_the_overlap_then_stops(
        live_server_asgi: LiveServer, settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENT_TOKEN_OVERLAP_S = 3
    url = live_server_asgi.url
    old = StringIO()
    call_command("agent_token", NODE, "--ip", "10.0.0.8", stdout=old, stderr=StringIO())
    old_token = old.getvalue().strip()
    new, said = StringIO(), StringIO()
    call_command("agent_token", NODE, "--rotate", stdout=new, stderr=said)
    new_token = new.getvalue().strip()
    old_row = NodeToken.objects.get(token_hash=token_key(old_token))
    assert f"rotated: {old_row.prefix}… of node {NODE} keeps working until " in said.getvalue()
    assert "then stops" in said.getvalue() and new_token.startswith("rwa_")
    # Both work during the overlap: the agent is restarted with the new one meanwhile.
    assert hello(url, old_token)[0] == hello(url, new_token)[0] == 200
    ended = wait_for(lambda: (h := hello(url, old_token))[0] == 401 and h, 15, 0.5,
                     "the old token to stop after its overlap")
    assert "expired" in ended[1] and "rotated" in ended[1]
    assert hello(url, new_token)[0] == 200
    new_row = NodeToken.objects.get(token_hash=token_key(new_token))
    assert (new_row.node, new_row.node_ip) == (NODE, "10.0.0.8")
    assert NodeToken.objects.get(pk=old_row.pk).replaced_by == new_row

    with pytest.raises(CommandError, match="no live token"):  # the old one is over
        call_command("agent_token", NODE, "--rotate", "--prefix", old_row.prefix,
                     stdout=StringIO(), stderr=StringIO())
    with pytest.raises(ApiError, match="cannot be rotated"):
        tokens.rotate(NodeToken.objects.get(pk=old_row.pk), None, timezone.now())


@pytest.mark.django_db
def test_an_admin_rotates_a_token_on_the_agents_page(admin: User, settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENT_TOKEN_OVERLAP_S = 600
    row, token = tokens.issue(NODE, admin, timezone.now())
    page = Client()
    page.force_login(admin)
    shown = page.post("/agents/", {"rotate": str(row.pk)}).content.decode()
    [new_token] = re.findall(r'<code id="new-token">(rwa_[\w-]+)</code>', shown)
    row.refresh_from_db()
    assert f"It replaces <code>{row.prefix}…</code>, which keeps working until" in shown
    assert row.replaced_by.token_hash == token_key(new_token)
    assert row.expires_at - timezone.now() <= timedelta(seconds=600)
    now = timezone.now()
    assert tokens.authenticate(f"Bearer {token}", "", now) == row  # still, for the overlap
    later = now + timedelta(seconds=601)
    with pytest.raises(ApiError, match=r"expired .*rotated"):
        tokens.authenticate(f"Bearer {token}", "", later)
    assert tokens.authenticate(f"Bearer {new_token}", "", later) == row.replaced_by
    assert "(rotated)" in page.get("/agents/").content.decode()
    # Rotated once: a second rotation of it is refused (its successor is the one to rotate).
    again = page.post("/agents/", {"rotate": str(row.pk)}).content.decode()
    assert "new-token" not in again and "was rotated already" in again
    assert NodeToken.objects.count() == 2


@pytest.mark.django_db
def test_a_token_may_expire(admin: User, settings) -> None:  # type: ignore[no-untyped-def]
    now = timezone.now()
    row, token = tokens.issue(NODE, admin, now, expires_days=1)
    settings.AGENT_TOKEN_EXPIRES_DAYS = 30  # the default for the tokens that do not say
    other, _ = tokens.issue("gpu-node-9", admin, now)
    assert (row.expires_at, other.expires_at) == (now + timedelta(days=1),
                                                  now + timedelta(days=30))
    assert tokens.authenticate(f"Bearer {token}", "", now + timedelta(hours=23)) == row
    with pytest.raises(ApiError, match=r"expired .*an admin issues a new one") as ended:
        tokens.authenticate(f"Bearer {token}", "", now + timedelta(days=1))
    assert ended.value.status == 401
    # An ended token's agent is no way to the node: the action goes another way.
    NodeToken.objects.filter(pk=row.pk).update(last_seen_at=now)
    assert node_with_agent("", NODE) == NODE
    NodeToken.objects.filter(pk=row.pk).update(expires_at=now)
    assert node_with_agent("", NODE) is None

    out, said = StringIO(), StringIO()
    call_command("agent_token", "gpu-node-10", "--expires-days", "7", stdout=out, stderr=said)
    assert "it stops working at" in said.getvalue()
    listed = StringIO()
    call_command("agent_token", "--list", stdout=listed)
    assert re.search(rf"{row.prefix}….*expired", listed.getvalue())
