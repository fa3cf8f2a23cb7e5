"""A page or link another site makes the browser open cannot act for the user:
every state change is a POST (a GET is refused 405 and changes nothing), and a
POST from a browser session needs the CSRF token (pages and the API alike); API
clients with a token need none."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone

from dashboard.alerts.models import Channel, Silence
from dashboard.incidents.findings import Finding
from dashboard.incidents.models import Incident
from dashboard.incidents.service import sync_findings
from tests.conftest import PASSWORD, api_token

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
STALLED = Finding("trial_stalled", "trial:mnist/t_0001", "critical", "no result for 9 min")


def session(user) -> Client:  # type: ignore[no-untyped-def]
    """A browser: enforces CSRF as a real one is subject to it."""
    client = Client(enforce_csrf_checks=True)
    assert client.login(username=user.username, password=PASSWORD)
    return client


def csrf_token(client: Client) -> str:
    assert client.get("/alerts/").status_code == 200  # any page with a form sets the cookie
    return client.cookies["csrftoken"].value


def firing() -> Incident:
    sync_findings({STALLED.kind}, [STALLED], timezone.now(), {})
    return Incident.objects.get(subject=STALLED.subject, state=Incident.FIRING)


def logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


# --- CSRF -----------------------------------------------------------------------------------
def test_every_form_that_posts_carries_the_csrf_token() -> None:
    forms = [(path.relative_to(TEMPLATES), match[0])
             for path in TEMPLATES.rglob("*.html")
             for match in re.finditer(r"<form\b[^>]*>.*?</form>", path.read_text(), re.S | re.I)
             if re.search(r"method=[\"']post[\"']", match[0], re.I)]
    assert len(forms) >= 8  # login, logout, silences, channels...
    missing = [str(where) for where, form in forms if "{% csrf_token %}" not in form]
    assert missing == []


def test_session_api_post_without_csrf_token_is_refused(operator) -> None:  # type: ignore[no-untyped-def]
    incident = firing()
    reply = session(operator).post(f"/api/alerts/{incident.pk}/ack", {"note": "on it"},
                                   content_type="application/json")
    assert reply.status_code == 403 and "CSRF" in reply.json()["detail"]
    incident.refresh_from_db()
    assert incident.acknowledged_at is None


def test_session_api_post_with_csrf_token_works(operator) -> None:  # type: ignore[no-untyped-def]
    incident = firing()
    client = session(operator)
    reply = client.post(f"/api/alerts/{incident.pk}/ack", {"note": "on it"},
                        content_type="application/json", HTTP_X_CSRFTOKEN=csrf_token(client))
    assert reply.status_code == 200
    incident.refresh_from_db()
    assert incident.acknowledged_by == operator


def test_token_api_post_needs_no_csrf_token(operator) -> None:  # type: ignore[no-untyped-def]
    incident = firing()
    token = api_token(operator)
    client = Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Token {token}")
    reply = client.post(f"/api/alerts/{incident.pk}/ack", {"note": "from a script"},
                        content_type="application/json")
    assert reply.status_code == 200
    incident.refresh_from_db()
    assert incident.ack_note == "from a script"


def test_page_form_post_without_csrf_token_is_refused(operator) -> None:  # type: ignore[no-untyped-def]
    client = session(operator)
    reply = client.post("/alerts/silences/", {"kind": "trial_stalled", "hours": "1",
                                              "comment": "forged"})
    assert reply.status_code == 403
    assert not Silence.objects.exists()
    assert client.post("/logout/").status_code == 403
    assert logged_in(client)


# --- POST only ---------------------------------------------------------------------------------
@pytest.fixture
def silence(operator) -> Silence:  # type: ignore[no-untyped-def]
    now = timezone.now()
    return Silence.objects.create(kind="trial_stalled", starts_at=now,
                                  ends_at=now + timedelta(hours=1), comment="deploy",
                                  created_by=operator)


@pytest.fixture
def channel(db: None) -> Channel:
    return Channel.objects.create(name="ops", kind=Channel.WEBHOOK,
                                  url="https://hooks.example.org/raywatch")


def test_get_cannot_end_a_silence(admin, silence: Silence) -> None:  # type: ignore[no-untyped-def]
    assert session(admin).get(f"/alerts/silences/{silence.pk}/end").status_code == 405
    silence.refresh_from_db()
    assert silence.active(timezone.now())


def test_get_cannot_delete_or_test_a_channel(admin, channel: Channel) -> None:  # type: ignore[no-untyped-def]
    client = session(admin)
    assert client.get(f"/alerts/channels/{channel.pk}/delete").status_code == 405
    assert client.get(f"/alerts/channels/{channel.pk}/test").status_code == 405
    assert Channel.objects.filter(pk=channel.pk).exists()
    assert not channel.deliveries.exists()


def test_get_cannot_log_out(viewer) -> None:  # type: ignore[no-untyped-def]
    client = session(viewer)
    assert client.get("/logout/").status_code == 405
    assert logged_in(client)


def test_get_cannot_acknowledge(operator) -> None:  # type: ignore[no-untyped-def]
    incident = firing()
    token = api_token(operator)
    reply = Client(HTTP_AUTHORIZATION=f"Token {token}").get(f"/api/alerts/{incident.pk}/ack")
    assert reply.status_code == 405
    incident.refresh_from_db()
    assert incident.acknowledged_at is None


def test_post_with_the_token_acts(admin, silence: Silence, channel: Channel) -> None:  # type: ignore[no-untyped-def]
    """The same requests as above, as the pages send them: they work."""
    client = session(admin)
    token = csrf_token(client)
    assert client.post(f"/alerts/silences/{silence.pk}/end",
                       {"csrfmiddlewaretoken": token}).status_code == 302
    silence.refresh_from_db()
    assert not silence.active(timezone.now())
    assert client.post(f"/alerts/channels/{channel.pk}/delete",
                       {"csrfmiddlewaretoken": token}).status_code == 302
    assert not Channel.objects.filter(pk=channel.pk).exists()
    assert client.post("/logout/", {"csrfmiddlewaretoken": token}).status_code == 302
    assert not logged_in(client)
