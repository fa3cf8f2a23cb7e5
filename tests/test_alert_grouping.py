"""Grouping and pacing as Alertmanager does it (group wait 30 s, group interval
5 min, repeat 4 h), resolved notices, silences and acknowledgements."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.alerts.models import Silence
from dashboard.alerts.service import acknowledge, create_silence, end_silence
from tests.alerting import Detector, route, send_all, webhook

pytestmark = [pytest.mark.both_backends, pytest.mark.django_db]


@pytest.fixture
def paced(alert_settings):  # type: ignore[no-untyped-def]
    alert_settings.ALERT_GROUP_WAIT_S = 30
    alert_settings.ALERT_GROUP_INTERVAL_S = 300
    alert_settings.ALERT_REPEAT_S = 4 * 3600
    return alert_settings


def past():  # type: ignore[no-untyped-def]
    """Simulated time runs from 10 h ago, so every message made is already due to send."""
    return timezone.now() - timedelta(hours=10)


def s(t0, seconds: float):  # type: ignore[no-untyped-def]
    return t0 + timedelta(seconds=seconds)


def test_200_incidents_of_one_experiment_arrive_as_one_message(paced, receivers) -> None:  # type: ignore[no-untyped-def]
    receiver = receivers(200)
    webhook(receiver.url)
    detector, t0 = Detector(), past()
    for n in range(200):  # a search falls over: 200 trials stall within 25 s
        at = s(t0, n * 0.125)
        detector.find(f"trial:asha/t{n:03d}", now=at, experiment="asha", node_ip="10.0.0.5")
        route(at)
    assert send_all() == 0  # group wait: nothing yet
    assert len(route(s(t0, 30))) == 1
    assert send_all() == 1
    [body] = receiver.bodies()
    assert body["firing"] == 200 and len(body["incidents"]) == 200
    assert body["title"] == "[FIRING:200] experiment asha"
    # Nothing new: no more messages, however often the router runs.
    for t in (31, 60, 400, 3600):
        assert route(s(t0, t)) == []
    assert len(receiver.requests) == 1


def test_later_incidents_wait_for_the_group_interval(paced, receivers) -> None:  # type: ignore[no-untyped-def]
    receiver = receivers(200)
    webhook(receiver.url)
    detector, t0 = Detector(), past()
    detector.find("trial:asha/t1", now=t0, experiment="asha")
    route(s(t0, 30))
    for n in range(10):  # ten more start after the first message went out
        detector.find(f"trial:asha/late{n}", now=s(t0, 40 + n), experiment="asha")
        assert route(s(t0, 40 + n)) == []
    assert route(s(t0, 329)) == []
    [second] = route(s(t0, 330))  # 5 min after the first message
    assert second.message["firing"] == 11
    assert sum(i["new"] for i in second.message["incidents"]) == 10
    # Another experiment is its own group, with its own wait.
    detector.find("trial:pbt/t1", now=s(t0, 331), experiment="pbt")
    [other] = route(s(t0, 361))
    assert other.group_key == "experiment:pbt" and other.message["firing"] == 1


def test_a_resolved_incident_sends_one_resolved_notice(paced, receivers) -> None:  # type: ignore[no-untyped-def]
    receiver = receivers(200)
    webhook(receiver.url)
    detector, t0 = Detector(), past()
    detector.find("trial:asha/t1", now=t0, experiment="asha")
    route(s(t0, 30))
    detector.clear("trial:asha/t1", now=s(t0, 100))
    assert route(s(t0, 100)) == []  # within the group interval
    [notice] = route(s(t0, 330))
    assert notice.status == "resolved"
    assert notice.message["title"] == "[RESOLVED:1] experiment asha"
    assert notice.message["incidents"][0]["resolved_at"]
    for t in (331, 700, 20000):
        assert route(s(t0, t)) == []
    assert send_all() == 2
    assert [b["status"] for b in receiver.bodies()] == ["firing", "resolved"]


def test_an_incident_resolved_before_anyone_was_told_sends_nothing(paced, receivers) -> None:  # type: ignore[no-untyped-def]
    receiver = receivers(200)
    webhook(receiver.url)
    detector, t0 = Detector(), past()
    detector.find("trial:asha/flap", now=t0, experiment="asha")
    detector.clear("trial:asha/flap", now=s(t0, 10))  # gone within the group wait
    assert route(s(t0, 30)) == [] and route(s(t0, 400)) == []
    assert receiver.requests == []


def test_a_silenced_incident_sends_nothing_until_the_silence_ends(  # type: ignore[no-untyped-def]
        paced, receivers, operator) -> None:
    receiver = receivers(200)
    webhook(receiver.url)
    t0 = past()
    silence = create_silence(operator, {"kind": "test_*", "node": "10.0.0.*"}, t0,
                             s(t0, 3600), "maintenance on node 5", t0)
    detector = Detector()
    detector.find("trial:asha/t1", now=t0, experiment="asha", node_ip="10.0.0.5")
    detector.find("trial:asha/t2", now=t0, experiment="asha", node_ip="10.0.1.7")  # not silenced
    [message] = route(s(t0, 30))
    assert [i["subject"] for i in message.message["incidents"]] == ["trial:asha/t2"]
    detector.clear("trial:asha/t1", now=s(t0, 60))  # silenced: no resolved notice either
    detector.find("trial:asha/t3", now=s(t0, 70), experiment="asha", node_ip="10.0.0.5")
    assert route(s(t0, 400)) == []
    # The silence ends while t3 still fires: now it is told.
    end_silence(Silence.objects.get(pk=silence.pk), s(t0, 500))
    [told] = route(s(t0, 501))
    assert [i["subject"] for i in told.message["incidents"] if i["new"]] == ["trial:asha/t3"]
    assert "unsilenced" in [e.kind for e in detector.incident("trial:asha/t3").events.all()]


def test_a_still_firing_group_repeats_every_4_h_until_acknowledged(  # type: ignore[no-untyped-def]
        paced, receivers, operator) -> None:
    webhook(receivers(200).url)
    detector, t0 = Detector(), past()
    detector.find("trial:asha/t1", now=t0, experiment="asha")
    route(s(t0, 30))
    assert route(s(t0, 30 + 4 * 3600 - 1)) == []
    [reminder] = route(s(t0, 30 + 4 * 3600))
    assert reminder.message["repeat"] and reminder.message["title"].endswith("(still firing)")
    acknowledge(detector.incident("trial:asha/t1"), operator, "on it", s(t0, 5 * 3600))
    assert route(s(t0, 30 + 8 * 3600)) == []  # acknowledged: no more reminders


def test_escalation_is_news_and_routing_respects_minimum_severity(paced, receivers) -> None:  # type: ignore[no-untyped-def]
    pager, chat = receivers(200), receivers(200)
    webhook(pager.url, name="pager", min_severity="critical")
    webhook(chat.url, name="chat", kinds=["trial_*", "test_*"])
    detector, t0 = Detector(), past()
    detector.find("trial:asha/t1", now=t0, experiment="asha", severity="warning")
    assert [d.channel.name for d in route(s(t0, 30))] == ["chat"]
    detector.find("trial:asha/t1", now=s(t0, 60), experiment="asha", severity="critical")
    made = route(s(t0, 330))
    assert sorted(d.channel.name for d in made) == ["chat", "pager"]
    assert all(d.message["incidents"][0]["severity"] == "critical" for d in made)


def test_an_evaluation_costs_the_same_queries_for_200_findings_as_for_20(  # type: ignore[no-untyped-def]
        django_assert_max_num_queries) -> None:
    """A search that falls over sends every evaluation 200 findings with no cluster named
    (the one RAY_ADDRESS points at): their cluster is looked up once, not once each."""
    from dashboard.incidents.findings import Finding
    from dashboard.incidents.service import sync_findings

    def findings(count: int) -> list[Finding]:
        return [Finding(kind="test_stalled", subject=f"trial:asha/t{n:03d}",
                        severity="critical", summary="stalled") for n in range(count)]

    now = timezone.now()
    for count in (20, 200):  # opened first, then the same again: nothing changes
        sync_findings(["test_stalled"], findings(count), now)
        with django_assert_max_num_queries(12):
            assert sync_findings(["test_stalled"], findings(count), now) == {
                "opened": 0, "updated": 0, "resolved": 0}
