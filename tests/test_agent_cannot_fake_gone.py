"""A node token's "gone" does not end a trial that Ray still runs: a token that took a
node's name or address could answer "gone" for a process it never saw, and the audit
would record a success while the trial runs on. Ray (current, and listing the trial's actor
alive) overrules it: the action fails, saying so."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from collectors.agent import wire
from dashboard.actions.models import AuditEntry
from dashboard.agents import tokens
from dashboard.agents.commands import hand_out, take_result
from dashboard.agents.models import NodeProcess
from tests.conftest import mark_ray_current, token_client
from tests.patience import patient
from tests.test_terminate_on_this_host import hung_trial

# On SQLite too: an agent's "gone" against Ray's view. The action runs in a thread.
pytestmark = [pytest.mark.both_backends, pytest.mark.django_db(transaction=True)]


def test_an_agent_saying_gone_while_ray_lists_the_actor_alive_is_no_success(  # type: ignore[no-untyped-def]
        settings, operator) -> None:
    settings.EMBEDDED, settings.TERMINATE_GRACE_S, settings.FORCE_WAIT_S = True, 1.0, 1.0
    settings.RAY_ADDRESS = settings.RAY_GCS_ADDRESS = settings.LOCAL_RAY_FILE = None
    now = timezone.now()
    trial = hung_trial(4242, node_ip="10.0.0.9")  # Ray: actor alive on node gpu-b
    row, _ = tokens.issue("gpu-b", None, now, "10.0.0.9")
    row.last_seen_at = now
    row.save()
    NodeProcess.objects.create(node="gpu-b", pid=4242, create_time=1234.5, at=now)
    mark_ray_current()
    reply = token_client(operator).post(f"/api/trials/{trial.pk}/terminate",
                                        {"reason": "hung"}, format="json")
    assert reply.status_code == 202, reply.content
    entry = AuditEntry.objects.get(pk=reply.json()["action_id"])
    answered = 0
    deadline = time.monotonic() + patient(60)
    while entry.state in AuditEntry.ACTIVE and time.monotonic() < deadline:
        mark_ray_current()  # Ray keeps answering: its actor is alive
        for command in hand_out(row, timezone.now()):  # the agent answers "gone", always
            take_result(row, command["id"], {"version": wire.VERSION, "outcome": "gone",
                                             "detail": "no such process",
                                             "nonce": command["nonce"]}, timezone.now())
            answered += 1
        time.sleep(0.1)
        entry.refresh_from_db()
    assert answered == 2  # SIGTERM, then the forced kill
    assert entry.state == AuditEntry.FAILED, entry.outcome
    assert "says pid 4242 on gpu-b is gone, but Ray still lists its actor" in entry.outcome
