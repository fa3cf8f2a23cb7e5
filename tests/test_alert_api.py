"""Acting on alerts through the API and the pages: who may acknowledge, silence and
configure channels, what each refusal looks like, and that a channel's webhook URL
and secret (credentials) are never shown back."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from dashboard.alerts.models import Channel, Silence
from dashboard.incidents.findings import Finding
from dashboard.incidents.models import Incident, IncidentEvent
from dashboard.incidents.service import sync_findings
from tests.conftest import PASSWORD, api_token

pytestmark = pytest.mark.both_backends

STALLED = Finding("trial_stalled", "trial:mnist/t_0001", "critical",
                  "no result for 9 min (usually every 20 s)")
SLOW = Finding("step_time_regression", "trial:mnist/t_0002", "warning",
               "steps take 3.4x longer than before")
CONTEXT = {STALLED.subject: {"experiment": "mnist", "node_ip": "10.0.0.5"},
           SLOW.subject: {"experiment": "mnist", "node_ip": "10.0.0.6"}}
TOKEN_PATH = "/services/T0RAYWATCH/B0ALERTS/q8ZkS3cr3tWebhookT0ken"
SECRET = "hmac-signing-Secret-5e7f"


def api(user) -> Client:  # type: ignore[no-untyped-def]
    return Client(HTTP_AUTHORIZATION=f"Token {api_token(user)}")


def browser(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def fire(*findings: Finding) -> list[Incident]:
    sync_findings({f.kind for f in findings}, findings, timezone.now(), CONTEXT)
    return [Incident.objects.get(kind=f.kind, subject=f.subject, state=Incident.FIRING)
            for f in findings]


def acknowledged_events(incident: Incident) -> list[IncidentEvent]:
    return list(incident.events.filter(kind=IncidentEvent.ACKNOWLEDGED))


# --- acknowledging ----------------------------------------------------------------------
def test_viewer_cannot_acknowledge(viewer) -> None:  # type: ignore[no-untyped-def]
    [incident] = fire(STALLED)
    reply = api(viewer).post(f"/api/alerts/{incident.pk}/ack", {"note": "mine"},
                             content_type="application/json")
    assert reply.status_code == 403
    assert "operator" in reply.json()["detail"]
    incident.refresh_from_db()
    assert incident.acknowledged_at is None and incident.acknowledged_by is None
    assert acknowledged_events(incident) == []
    assert api(viewer).get("/api/alerts/").json()[0]["acknowledged_by"] is None


def test_operator_acknowledges_and_the_timeline_says_who(operator) -> None:  # type: ignore[no-untyped-def]
    [incident] = fire(STALLED)
    reply = api(operator).post(f"/api/alerts/{incident.pk}/ack",
                               {"note": "restarting the trainer"},
                               content_type="application/json")
    assert reply.status_code == 200
    assert reply.json()["acknowledged_by"] == operator.username
    listed = api(operator).get("/api/alerts/?state=firing").json()
    assert [(a["id"], a["acknowledged_by"], a["ack_note"]) for a in listed] == [
        (incident.pk, operator.username, "restarting the trainer")]
    detail = api(operator).get(f"/api/alerts/{incident.pk}/").json()
    assert [e["kind"] for e in detail["timeline"]] == ["opened", "acknowledged"]
    acked = detail["timeline"][-1]
    assert acked["actor"] == operator.username and acked["text"] == "restarting the trainer"


def test_acknowledging_twice_is_harmless(operator, admin) -> None:  # type: ignore[no-untyped-def]
    [incident] = fire(STALLED)
    first = api(operator).post(f"/api/alerts/{incident.pk}/ack", {"note": "on it"},
                               content_type="application/json")
    again = api(admin).post(f"/api/alerts/{incident.pk}/ack", {"note": "me too"},
                            content_type="application/json")
    assert first.status_code == again.status_code == 200
    assert again.json()["acknowledged_by"] == operator.username  # the first one stands
    assert again.json()["ack_note"] == "on it"
    assert len(acknowledged_events(incident)) == 1


def test_a_resolved_incident_cannot_be_acknowledged(operator) -> None:  # type: ignore[no-untyped-def]
    [incident] = fire(STALLED)
    sync_findings({STALLED.kind}, [], timezone.now())  # the detector no longer finds it
    reply = api(operator).post(f"/api/alerts/{incident.pk}/ack", {},
                               content_type="application/json")
    assert reply.status_code == 409
    assert "resolved" in reply.json()["detail"]
    incident.refresh_from_db()
    assert incident.state == Incident.RESOLVED and incident.acknowledged_at is None
    assert acknowledged_events(incident) == []
    assert api(operator).post("/api/alerts/999999/ack", {}).status_code == 404


# --- silences -----------------------------------------------------------------------------
def test_operator_creates_a_silence_and_everyone_can_list_it(operator, viewer) -> None:  # type: ignore[no-untyped-def]
    ends = timezone.now() + timedelta(hours=2)
    reply = api(operator).post("/api/silences/", {
        "kind": "trial_*", "experiment": "mnist", "ends_at": ends.isoformat(),
        "comment": "planned restart of the mnist search"}, content_type="application/json")
    assert reply.status_code == 201, reply.content
    created = reply.json()
    assert created["created_by"] == operator.username and created["active"] is True
    listed = api(viewer).get("/api/silences/?active=true").json()
    assert [(s["id"], s["kind"], s["experiment"], s["comment"]) for s in listed] == [
        (created["id"], "trial_*", "mnist", "planned restart of the mnist search")]


def test_viewer_cannot_create_a_silence(viewer) -> None:  # type: ignore[no-untyped-def]
    reply = api(viewer).post("/api/silences/", {
        "kind": "*", "ends_at": (timezone.now() + timedelta(hours=1)).isoformat(),
        "comment": "quiet please"}, content_type="application/json")
    assert reply.status_code == 403
    assert not Silence.objects.exists()


@pytest.mark.parametrize(("change", "field", "says"), [
    ({"kind": ""}, "detail", "give at least one matcher"),
    ({"starts_at": "+3h"}, "detail", "the silence must end after it starts"),
    ({"comment": ""}, "comment", "may not be blank"),
    ({"severity": "urgent"}, "detail", "severity must be one of info, warning, critical"),
])
def test_a_bad_silence_is_refused_with_the_reason(  # type: ignore[no-untyped-def]
    operator, change: dict[str, str], field: str, says: str
) -> None:
    now = timezone.now()
    body: dict[str, Any] = {"kind": "trial_stalled", "ends_at": (now + timedelta(hours=1)),
                            "comment": "maintenance"}
    body.update(change)
    if body.get("starts_at") == "+3h":
        body["starts_at"] = now + timedelta(hours=3)
    body = {k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in body.items()}
    reply = api(operator).post("/api/silences/", body, content_type="application/json")
    assert reply.status_code == 400
    assert says in str(reply.json()[field])
    assert not Silence.objects.exists()


def test_a_silence_shows_on_the_alerts_it_mutes(operator, viewer) -> None:  # type: ignore[no-untyped-def]
    stalled, slow = fire(STALLED, SLOW)
    assert browser(viewer).get("/alerts/").context["alert_summary"]["open"] == 2
    created = api(operator).post("/api/silences/", {
        "node": "10.0.0.5", "ends_at": (timezone.now() + timedelta(hours=1)).isoformat(),
        "comment": "node 10.0.0.5 is being re-imaged"}, content_type="application/json").json()
    by_id = {a["id"]: a for a in api(viewer).get("/api/alerts/").json()}
    assert by_id[stalled.pk]["silenced_by"] == created["id"]
    assert by_id[slow.pk]["silenced_by"] is None
    detail = api(viewer).get(f"/api/alerts/{stalled.pk}/").json()
    assert detail["silenced_by"] == created["id"]
    assert detail["timeline"][-1]["kind"] == "silenced"
    assert detail["timeline"][-1]["actor"] == operator.username
    acked = api(operator).post(f"/api/alerts/{stalled.pk}/ack", {"note": "seen"},
                               content_type="application/json").json()
    assert acked["silenced_by"] == created["id"]  # acknowledging does not lift the silence
    header = browser(viewer).get("/alerts/").content.decode()
    assert 'data-open="1"' in header  # the silenced one no longer counts as open


def test_silences_page_lets_operators_create_and_end_but_not_viewers(  # type: ignore[no-untyped-def]
    operator, viewer
) -> None:
    form = {"kind": "node_dead", "hours": "2", "comment": "rack 4 power work"}
    assert browser(viewer).post("/alerts/silences/", form).status_code == 403
    assert not Silence.objects.exists()
    assert 'id="silence-form"' not in browser(viewer).get("/alerts/silences/").content.decode()

    made = browser(operator).post("/alerts/silences/", form)
    assert made.status_code == 302
    silence = Silence.objects.get()
    assert silence.created_by == operator and silence.active(timezone.now())
    assert browser(viewer).post(f"/alerts/silences/{silence.pk}/end").status_code == 403
    assert browser(operator).post(f"/alerts/silences/{silence.pk}/end").status_code == 302
    silence.refresh_from_db()
    assert not silence.active(timezone.now())

    refused = browser(operator).post("/alerts/silences/", {**form, "kind": ""})
    assert refused.status_code == 200
    assert "at least one matcher" in refused.content.decode()
    assert Silence.objects.count() == 1


# --- pages ----------------------------------------------------------------------------------
def test_alert_pages_need_the_viewer_role(viewer, roleless) -> None:  # type: ignore[no-untyped-def]
    [incident] = fire(STALLED)
    channel = Channel.objects.create(name="ops", kind=Channel.SLACK,
                                     url=f"https://hooks.slack.com{TOKEN_PATH}")
    paths = ["/alerts/", f"/incidents/{incident.pk}/", "/alerts/silences/", "/alerts/channels/",
             f"/alerts/channels/{channel.pk}/"]
    for path in paths:
        anonymous = Client().get(path)
        assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/"), path
        assert browser(roleless).get(path).status_code == 403, path
        assert browser(viewer).get(path).status_code == 200, path
    assert browser(viewer).get("/incidents/999999/").status_code == 404


# --- channels -------------------------------------------------------------------------------
def channel_form(**change: str) -> dict[str, str]:
    return {"name": "ml-oncall", "kind": Channel.SLACK,
            "url": f"https://hooks.slack.com{TOKEN_PATH}", "secret": "", "kinds": "trial_*",
            "min_severity": "warning", **change}


def test_only_admins_add_or_change_channels(admin, operator, settings) -> None:  # type: ignore[no-untyped-def]
    settings.WEBHOOK_ALLOW_PRIVATE = True  # no name lookups from the test machine
    assert browser(operator).post("/alerts/channels/", channel_form()).status_code == 403
    assert not Channel.objects.exists()
    page = browser(operator).get("/alerts/channels/").content.decode()
    assert 'id="channel-form"' not in page

    added = browser(admin).post("/alerts/channels/", channel_form())
    channel = Channel.objects.get()
    assert added.status_code == 302 and added["Location"] == f"/alerts/channels/{channel.pk}/"
    assert channel.kinds == ["trial_*"]
    for path in (f"/alerts/channels/{channel.pk}/", f"/alerts/channels/{channel.pk}/test",
                 f"/alerts/channels/{channel.pk}/delete"):
        assert browser(operator).post(path, channel_form(name="hijacked")).status_code == 403
    channel.refresh_from_db()
    assert channel.name == "ml-oncall" and channel.deliveries.count() == 0
    assert 'id="channel-form"' not in browser(operator).get(
        f"/alerts/channels/{channel.pk}/").content.decode()


@pytest.mark.parametrize(("url", "says"), [
    ("ftp://hooks.example.com/upload", "only http:// and https://"),
    ("http://127.0.0.1:8080/hook", "RAYWATCH_WEBHOOK_ALLOW_PRIVATE"),
    ("http://localhost:8080/hook", "RAYWATCH_WEBHOOK_ALLOW_PRIVATE"),
    ("http://[::1]/hook", "RAYWATCH_WEBHOOK_ALLOW_PRIVATE"),
    ("http://10.1.2.3/hook", "RAYWATCH_WEBHOOK_ALLOW_PRIVATE"),
    ("https://169.254.169.254/latest/meta-data/", "RAYWATCH_WEBHOOK_ALLOW_PRIVATE"),
])
def test_channel_urls_to_internal_addresses_are_refused(  # type: ignore[no-untyped-def]
    admin, settings, url: str, says: str
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE = False
    reply = browser(admin).post("/alerts/channels/", channel_form(kind=Channel.WEBHOOK, url=url))
    assert reply.status_code == 200
    assert says in reply.content.decode()
    assert not Channel.objects.exists()


def test_internal_channel_urls_are_accepted_when_allowed(admin, settings) -> None:  # type: ignore[no-untyped-def]
    settings.WEBHOOK_ALLOW_PRIVATE = True
    reply = browser(admin).post("/alerts/channels/", channel_form(
        kind=Channel.WEBHOOK, url="http://127.0.0.1:8080/hook"))
    assert reply.status_code == 302
    assert Channel.objects.get().url == "http://127.0.0.1:8080/hook"
    refused = browser(admin).post("/alerts/channels/", channel_form(
        name="other", kind=Channel.WEBHOOK, url="ftp://127.0.0.1/hook"))
    assert "only http:// and https://" in refused.content.decode()  # the scheme still counts


def test_webhook_url_and_secret_are_never_shown_back(admin, viewer, settings) -> None:  # type: ignore[no-untyped-def]
    settings.WEBHOOK_ALLOW_PRIVATE = True
    settings.NOTIFY_TIMEOUT_S = 2.0
    added = browser(admin).post("/alerts/channels/", channel_form(
        kind=Channel.WEBHOOK, url=f"http://127.0.0.1:9{TOKEN_PATH}", secret=SECRET))
    channel = Channel.objects.get()
    assert channel.url.endswith(TOKEN_PATH) and channel.secret == SECRET

    def pages() -> list[str]:
        shown = [browser(admin).get(added["Location"]),
                 browser(admin).get("/alerts/channels/"),
                 browser(viewer).get(f"/alerts/channels/{channel.pk}/")]
        return [reply.content.decode() for reply in shown]

    # Saved again with the URL and secret left empty: the stored ones stay.
    edited = browser(admin).post(added["Location"], channel_form(
        kind=Channel.WEBHOOK, url="", secret="", min_severity="critical"))
    assert edited.status_code == 302
    channel.refresh_from_db()
    assert channel.url.endswith(TOKEN_PATH) and channel.secret == SECRET
    assert channel.min_severity == "critical"
    # A failing test message (nothing listens on port 9) is reported on the page too.
    browser(admin).post(f"/alerts/channels/{channel.pk}/test")
    channel.refresh_from_db()
    assert channel.last_error
    for html in pages():
        assert "127.0.0.1" in html and "/…" in html  # recognisable, masked
        assert "q8ZkS3cr3tWebhookT0ken" not in html and "T0RAYWATCH" not in html
        assert SECRET not in html
    assert "set (never shown)" in pages()[0]


# --- the schema --------------------------------------------------------------------------------
def test_schema_documents_the_alert_endpoints(viewer) -> None:  # type: ignore[no-untyped-def]
    schema = api(viewer).get("/api/schema/", HTTP_ACCEPT="application/json").json()
    paths = schema["paths"]
    assert set(paths["/api/alerts/"]) == {"get"}
    assert set(paths["/api/alerts/{id}/"]) == {"get"}
    assert set(paths["/api/alerts/{id}/ack"]) == {"post"}
    assert set(paths["/api/silences/"]) == {"get", "post"}
    alert_params = {p["name"] for p in paths["/api/alerts/"]["get"]["parameters"]}
    assert {"state", "kind", "severity", "experiment", "node", "group"} <= alert_params
    timeline = schema["components"]["schemas"]["IncidentDetail"]["properties"]["timeline"]
    assert timeline["items"] == {"$ref": "#/components/schemas/TimelineEntry"}
