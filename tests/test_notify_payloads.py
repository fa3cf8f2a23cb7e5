"""What each chat service receives: the exact JSON, posted to a real receiver."""

from __future__ import annotations

import hashlib
import hmac
import time

import pytest

from dashboard.alerts.models import Delivery
from tests.alerting import Detector, route, send_all, webhook

pytestmark = pytest.mark.django_db
BASE = "https://raywatch.example.org"


@pytest.fixture
def stalled(alert_settings, receivers):  # type: ignore[no-untyped-def]
    """One receiver per service, and one critical incident on a trial of an experiment."""
    got = {kind: receivers(200) for kind in ("slack", "discord", "teams", "webhook")}
    for kind, receiver in got.items():
        webhook(receiver.url, name=f"ops-{kind}", kind=kind,
                secret="s3cret" if kind == "webhook" else "")
    detector = Detector()
    detector.find("trial:asha/t_0001", severity="critical", experiment="asha",
                  node_ip="10.0.0.5", summary="trial t_0001: no result for 12 min <b>",
                  details={"gpu": "GPU-abc"})
    route()
    assert send_all() == 4
    incident = detector.incident("trial:asha/t_0001")
    return got, incident


def item(incident) -> dict:  # type: ignore[no-untyped-def]
    return {
        "id": incident.pk, "cluster": "default", "kind": "test_stalled", "severity": "critical",
        "state": "firing",
        "new": True, "subject": "trial:asha/t_0001",
        "summary": "trial t_0001: no result for 12 min <b>", "experiment": "asha",
        "node_ip": "10.0.0.5", "trial_id": "", "gpu": "GPU-abc",
        "opened_at": incident.opened_at.isoformat(), "resolved_at": None,
        "acknowledged_by": None, "url": f"{BASE}/incidents/{incident.pk}/",
        "subject_url": f"{BASE}/incidents/{incident.pk}/",
    }


def since(incident) -> str:  # type: ignore[no-untyped-def]
    return f"since {incident.opened_at:%Y-%m-%d %H:%M:%S} UTC"


def test_generic_webhook_gets_the_documented_payload_signed(stalled) -> None:  # type: ignore[no-untyped-def]
    got, incident = stalled
    [request] = got["webhook"].requests
    delivery = Delivery.objects.get(channel__kind="webhook")
    assert request.json == {
        "version": 1, "id": str(delivery.pk), "status": "firing", "repeat": False,
        "cluster": "default", "group": {"key": "experiment:asha", "label": "experiment asha"},
        "title": "[FIRING:1] experiment asha", "severity": "critical",
        "url": f"{BASE}/alerts/?group=experiment%3Aasha", "firing": 1, "resolved": 0,
        "incidents": [item(incident)], "truncated": 0,
    }
    # A receiver checks origin and freshness: HMAC-SHA256 over "timestamp.body".
    timestamp = request.headers["X-Raywatch-Timestamp"]
    expected = hmac.new(b"s3cret", timestamp.encode() + b"." + request.body,
                        hashlib.sha256).hexdigest()
    assert request.headers["X-Raywatch-Signature"] == f"sha256={expected}"
    assert abs(int(timestamp) - time.time()) < 300
    assert request.headers["Content-Type"] == "application/json"


def test_slack_gets_blocks_with_what_where_since_and_links(stalled) -> None:  # type: ignore[no-untyped-def]
    got, incident = stalled
    [request] = got["slack"].requests
    assert request.json == {
        "text": "[FIRING:1] experiment asha",
        "blocks": [
            {"type": "header", "text": {"type": "plain_text",
                                        "text": "[FIRING:1] experiment asha"}},
            {"type": "section", "text": {"type": "mrkdwn", "text": (
                f":red_circle: *critical* `test_stalled` <{BASE}/incidents/{incident.pk}/|"
                "trial t_0001: no result for 12 min &lt;b&gt;>\n"
                f"experiment asha · node 10.0.0.5 · GPU GPU-abc · {since(incident)}"),
                "verbatim": True}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": (
                f"<{BASE}/alerts/?group=experiment%3Aasha|Open in raywatch>"),
                "verbatim": True}]},
        ],
    }
    assert "X-Raywatch-Signature" not in request.headers


def test_discord_gets_embeds_and_pings_nobody(stalled) -> None:  # type: ignore[no-untyped-def]
    got, incident = stalled
    [request] = got["discord"].requests
    assert request.json == {
        "content": "\\[FIRING:1\\] experiment asha",
        "embeds": [{
            "title": "critical · test_stalled",
            "description": ("trial t\\_0001: no result for 12 min \\<b\\>\n"
                            f"experiment asha · node 10.0.0.5 · GPU GPU-abc · {since(incident)}"),
            "url": f"{BASE}/incidents/{incident.pk}/", "color": 0xD93F0B,
            "timestamp": incident.opened_at.isoformat(),
        }],
        "allowed_mentions": {"parse": []},
    }


def test_teams_gets_an_adaptive_card_with_a_link_back(stalled) -> None:  # type: ignore[no-untyped-def]
    got, incident = stalled
    [request] = got["teams"].requests
    assert request.json == {"type": "message", "attachments": [{
        "contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None,
        "content": {
            "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
            "type": "AdaptiveCard", "version": "1.4",
            "body": [
                {"type": "TextBlock", "text": "\\[FIRING:1\\] experiment asha", "weight": "Bolder",
                 "size": "Medium", "wrap": True, "color": "Attention"},
                {"type": "TextBlock", "wrap": True, "separator": True,
                 "text": "**critical** test_stalled: trial t\\_0001: no result for 12 min \\<b\\>"},
                {"type": "FactSet", "facts": [
                    {"title": "Where", "value": "experiment asha · node 10.0.0.5 · GPU GPU-abc"},
                    {"title": "When", "value": since(incident)}]},
            ],
            "actions": [{"type": "Action.OpenUrl", "title": "Open in raywatch",
                         "url": f"{BASE}/alerts/?group=experiment%3Aasha"}],
        },
    }]}
