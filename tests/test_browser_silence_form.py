"""In Chromium: the silence and channel forms on the dark theme, with kind and severity
as choices from the code, and a new silence showing, before it is saved, which firing
incidents it would mute; saving it mutes exactly those."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from dashboard.alerts.models import Channel, Silence
from dashboard.incidents.findings import Finding
from dashboard.incidents.kinds import KINDS
from dashboard.incidents.models import Incident, IncidentEvent
from dashboard.incidents.service import sync_findings
from tests.conftest import LiveServer, login, off_the_loop

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
FIELD_BACKGROUND = "rgb(15, 20, 25)"  # raywatch.css --field, not the browser's white


def incidents() -> dict[str, Incident]:
    now = timezone.now()
    found = [Finding("trial_stalled", "trial:asha/t_1", "critical", "t_1: no result for 9 min"),
             Finding("trial_stalled", "trial:pbt/t_2", "critical", "t_2: no result for 7 min"),
             Finding("trial_errored", "trial:asha/t_3", "critical", "t_3 failed")]
    context = {f.subject: {"experiment": f.subject[6:].split("/")[0], "node_ip": "10.0.0.5"}
               for f in found}
    sync_findings({"trial_stalled", "trial_errored"}, found, now - timedelta(minutes=5), context)
    sync_findings({"trial_errored"}, [], now, context)  # t_3 resolved: not open any more
    memory = Finding("gpu_memory_high", "gpu:GPU-1", "warning", "GPU-1 memory at 97 %")
    sync_findings({"gpu_memory_high"}, [memory], now, {memory.subject: {"node_ip": "10.0.0.6"}})
    return {i.subject: i for i in Incident.objects.all()}


def previewed(page) -> list[int]:  # type: ignore[no-untyped-def]
    return sorted(int(i) for i in page.locator("#preview-list li").evaluate_all(
        "items => items.map(li => li.dataset.incident)"))


def test_silence_form_previews_what_it_would_mute(  # type: ignore[no-untyped-def]
    page, live_server_asgi: LiveServer, operator
) -> None:
    made = off_the_loop(incidents)
    login(page, live_server_asgi, operator, "/alerts/silences/")
    kind = page.locator("#silence-form select[name=kind]")
    offered = kind.locator("option").evaluate_all("options => options.map(o => o.value)")
    assert set(KINDS) <= set(offered) and "trial_*" in offered and offered[0] == ""
    severity = page.locator("#silence-form select[name=severity]")
    assert severity.locator("option").evaluate_all("o => o.map(x => x.value)") == [
        "", "info", "warning", "critical"]
    assert kind.evaluate("e => getComputedStyle(e).backgroundColor") == FIELD_BACKGROUND
    expect(page.locator("#silence-form label[for=id_node]")).to_have_text("Node IP")

    kind.select_option("trial_stalled")
    stalled = sorted(made[s].pk for s in ("trial:asha/t_1", "trial:pbt/t_2"))
    expect(page.locator("#preview-summary")).to_have_text("2 firing incidents match:")
    assert previewed(page) == stalled
    severity.select_option("warning")
    expect(page.locator("#preview-summary")).to_contain_text("No firing incident matches")
    severity.select_option("")
    page.fill("#silence-form input[name=experiment]", "asha")
    expect(page.locator("#preview-summary")).to_have_text("1 firing incident matches:")
    assert previewed(page) == [made["trial:asha/t_1"].pk]
    page.fill("#silence-form input[name=experiment]", "[asha")  # a broken glob says why
    expect(page.locator("#preview-summary")).to_contain_text("unbalanced [ ]")
    page.fill("#silence-form input[name=experiment]", "a*")

    page.fill("#silence-form textarea[name=comment]", "ASHA will stop these itself")
    page.click("#silence-form button[type=submit]")
    expect(page.locator(".messages")).to_contain_text("is on until")
    silence = Silence.objects.get()
    assert (silence.kind, silence.experiment) == ("trial_stalled", "a*")
    muted = IncidentEvent.objects.filter(kind=IncidentEvent.SILENCED)
    assert sorted(muted.values_list("incident_id", flat=True)) == [made["trial:asha/t_1"].pk]


def test_channel_form_offers_the_real_choices(  # type: ignore[no-untyped-def]
    page, live_server_asgi: LiveServer, admin, alert_settings
) -> None:
    login(page, live_server_asgi, admin, "/alerts/channels/")
    form = page.locator("#channel-form")
    expect(form.locator("label[for=id_url]")).to_have_text("Webhook URL")
    assert "Url:" not in form.inner_text()
    assert form.locator("input[name=url]").evaluate(
        "e => getComputedStyle(e).backgroundColor") == FIELD_BACKGROUND
    page.fill("#id_name", "ml-oncall")
    form.locator("select[name=kind]").select_option("slack")
    page.fill("#id_url", "http://127.0.0.1:9/services/T0/B0/x")
    form.locator("input[name=kinds][value='trial_*']").check()
    form.locator("input[name=kinds][value=gpu_orphan_memory]").check()
    form.locator("select[name=min_severity]").select_option("critical")
    form.locator("button[type=submit]").click()
    expect(page.locator(".messages")).to_contain_text("Channel ml-oncall added")
    channel = Channel.objects.get()
    assert (channel.kind, channel.kinds, channel.min_severity) == (
        "slack", ["trial_*", "gpu_orphan_memory"], "critical")
    # Editing shows the routes it has, ticked.
    ticked = page.locator("#channel-form input[name=kinds]:checked").evaluate_all(
        "boxes => boxes.map(b => b.value)")
    assert ticked == ["trial_*", "gpu_orphan_memory"]
