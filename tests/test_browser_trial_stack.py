"""In Chromium: an operator takes a hung trial's Python stack from its page and it shows
when it arrives (monospace, scrolling on its own), with the source that took it: the
agent of the trial's node, raywatch's own host's here (raywatch never takes one itself);
with no agent and Ray unreachable, the page says why none could be taken. The incident
page shows the stall's activity and stack, and follows it live from "taking" to why it
could not be taken."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import Locator, Route, expect

from collectors.hostinfo import host_name
from collectors.localray import free_port
from dashboard.incidents.findings import Finding
from dashboard.incidents.models import Incident
from dashboard.incidents.service import sync_findings
from dashboard.trials.models import Trial, TrialStack
from dashboard.trials.stacks import stack_payload
from tests.agents import node_agent
from tests.conftest import LiveServer, login, off_the_loop
from tests.patience import ms
from tests.test_agent_command_guard import hung_python  # noqa: F401 (a fixture)
from tests.test_terminate_on_this_host import hung_trial

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def no_ray(settings):  # type: ignore[no-untyped-def]
    settings.EMBEDDED = True  # the stack is taken in the server's background pool
    settings.RAY_ADDRESS, settings.RAY_GCS_ADDRESS = None, None
    settings.RAY_API_SERVER_ADDRESS = f"http://127.0.0.1:{free_port()}"  # nobody there
    return settings


def test_an_operator_takes_a_stack_from_the_trial_page(  # type: ignore[no-untyped-def]
        page, live_server_asgi: LiveServer, operator, no_ray, tmp_path: Path,
        hung_python: subprocess.Popen) -> None:  # noqa: F811
    trial = hung_trial(hung_python.pid)  # on raywatch's own host
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, live_server_asgi, operator, f"/trials/{trial.pk}/")
    box = page.locator("#trial-stack")
    expect(box).to_contain_text("No stack taken yet")
    # No agent on this host yet, and Ray cannot be reached: raywatch does not take the
    # stack itself, and says what each source said. The reply to the click comes late (a
    # slow proxy, a busy server): the push of the outcome arrives first, and the page keeps
    # the outcome, not the reply's older "taking" (CI saw this race once).
    page.route("**/stack", lambda route: reply_after_the_outcome(route, box))
    page.click("#take-stack")
    expect(page.locator("#take-stack")).to_be_enabled(timeout=ms(60))  # the reply was read
    # At once, not after the page's next read of the stack (every 5 s):
    assert "has no raywatch agent" in box.inner_text(), box.inner_text()
    expect(box.locator("[data-stack-reason]")).to_contain_text(
        "node 127.0.0.1 has no raywatch agent; Ray's dashboard: cannot reach")
    assert box.locator("pre.stack").count() == 0
    page.unroute("**/stack")

    with node_agent(live_server_asgi.url, tmp_path, pid=hung_python.pid):
        page.click("#take-stack")
        dump = box.locator("pre.stack")
        expect(dump).to_contain_text("wait_for_the_data_loader (<string>:6)", timeout=ms(30))
    expect(box).to_contain_text(f"py-spy by the agent of {host_name()}")
    expect(box).to_contain_text(f"asked by {operator.username}")
    expect(box).not_to_contain_text("Tried first")  # the best source took it
    style = dump.evaluate("e => [getComputedStyle(e).fontFamily, getComputedStyle(e).overflow]")
    assert "monospace" in style[0] and style[1] == "auto", style
    assert errors == []


def test_the_incident_page_follows_the_stalls_stack(  # type: ignore[no-untyped-def]
        page, live_server_asgi: LiveServer, viewer, hung_process) -> None:
    trial = hung_trial(hung_process.pid)
    now = timezone.now()
    asked = TrialStack.objects.create(trial=trial, pid=trial.pid, node_ip=trial.node_ip,
                                      requested_at=now - timedelta(seconds=2))
    stall = stalled(trial, asked)
    sync_findings([stall.kind], [stall], now, {stall.subject: {"trial": trial}})
    incident = Incident.objects.get(trial=trial)
    login(page, live_server_asgi, viewer, f"/incidents/{incident.pk}/")
    expect(page.locator('[data-fact="Activity"]')).to_have_text(
        "idle: CPU 0%, state S, per the agent of gpu-b")
    box = page.locator("#incident-stack")
    expect(box).to_contain_text(f"Taking the stack of pid {trial.pid} on 127.0.0.1")

    def fails() -> None:
        TrialStack.objects.filter(pk=asked.pk).update(
            state=TrialStack.FAILED, taken_at=timezone.now(),
            reason="Ray's dashboard answered 403 to /worker/traceback: profiling is off; "
                   "start the Ray head with RAY_DASHBOARD_ENABLE_PROFILING=1 to allow it")
        again = stalled(trial, TrialStack.objects.get(pk=asked.pk))
        sync_findings([again.kind], [again], timezone.now(), {})

    off_the_loop(fails)
    expect(box.locator("[data-stack-reason]")).to_contain_text(
        "RAY_DASHBOARD_ENABLE_PROFILING=1", timeout=ms(15))
    assert box.locator("pre.stack").count() == 0


def test_the_trial_page_reads_a_stack_being_taken_again(  # type: ignore[no-untyped-def]
        page, live_server_asgi: LiveServer, viewer, hung_process) -> None:
    """The push of the outcome is lost (the channel layer is at-most-once, and the socket
    stayed up): the page still shows it, read again while the stack is being taken."""
    trial = hung_trial(hung_process.pid)
    asked = TrialStack.objects.create(trial=trial, pid=trial.pid, node_ip=trial.node_ip,
                                      requested_at=timezone.now())
    login(page, live_server_asgi, viewer, f"/trials/{trial.pk}/")
    box = page.locator("#trial-stack")
    expect(box).to_contain_text(f"Taking the stack of pid {trial.pid} on 127.0.0.1")
    off_the_loop(lambda: TrialStack.objects.filter(pk=asked.pk).update(  # nothing pushed
        state=TrialStack.FAILED, taken_at=timezone.now(), reason="py-spy is not installed"))
    expect(box.locator("[data-stack-reason]")).to_have_text("py-spy is not installed",
                                                            timeout=ms(15))


def reply_after_the_outcome(route: Route, box: Locator) -> None:
    """Hand the browser the server's reply to a stack request only once the push of the
    stack's outcome has reached the page."""
    reply = route.fetch()
    expect(box.locator("[data-stack-reason]")).to_have_count(1, timeout=ms(30))
    route.fulfill(response=reply)


def stalled(trial: Trial, stack: TrialStack) -> Finding:
    return Finding(
        "trial_stalled", f"trial:search/{trial.trial_id}", "critical",
        "Trial t_00000 has reported no result for 300 s (limit 120 s) while its process is "
        "alive (idle: CPU 0%, state S, per the agent of gpu-b)",
        {"activity": "idle: CPU 0%, state S, per the agent of gpu-b", "busy": False,
         "activity_unknown": "", "stack": stack_payload(stack)})
