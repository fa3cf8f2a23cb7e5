"""Admins issue node tokens (shown once, kept as a hash) and revoke them, on the Agents
page or with `manage.py agent_token`; nobody else can."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from collectors.agent.wire import token_key
from dashboard.agents import tokens
from dashboard.agents.models import NodeToken
from dashboard.core.errors import ApiError

pytestmark = [pytest.mark.both_backends, pytest.mark.django_db]


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_an_admin_issues_a_token_once_and_revokes_it(admin: User) -> None:
    page = logged_in(admin)
    shown = page.post("/agents/", {"node": "gpu-node-7", "node_ip": "10.0.0.7"})
    assert shown.status_code == 200 and shown["Cache-Control"] == "no-store"
    [token] = re.findall(r'<code id="new-token">(rwa_[\w-]+)</code>', shown.content.decode())
    row = NodeToken.objects.get()
    assert (row.node, row.node_ip, row.created_by) == ("gpu-node-7", "10.0.0.7", admin)
    assert row.token_hash == token_key(token) and token not in str(vars(row))
    listed = page.get("/agents/").content.decode()
    assert row.prefix in listed and token not in listed  # never shown again

    assert tokens.authenticate(f"Bearer {token}", "10.0.0.7", timezone.now()) == row
    assert page.post(f"/agents/{row.pk}/revoke").status_code == 302
    with pytest.raises(ApiError, match="revoked"):
        tokens.authenticate(f"Bearer {token}", "10.0.0.7", timezone.now())


def test_only_admins_see_or_issue_tokens(operator: User, viewer: User) -> None:
    for user in (operator, viewer):
        page = logged_in(user)
        assert page.get("/agents/").status_code == 403
        assert page.post("/agents/", {"node": "gpu-node-7"}).status_code == 403
    assert not NodeToken.objects.exists()
    assert Client().get("/agents/").status_code == 302  # to the login page


def test_manage_py_prints_a_token_once_and_revokes_the_nodes_tokens() -> None:
    out = StringIO()
    call_command("agent_token", "gpu-node-8", "--ip", "10.0.0.8", stdout=out, stderr=StringIO())
    token = out.getvalue().strip()
    assert NodeToken.objects.get(token_hash=token_key(token)).node_ip == "10.0.0.8"
    call_command("agent_token", "gpu-node-8", "--revoke", stdout=StringIO())
    assert NodeToken.objects.get().revoked_at is not None
