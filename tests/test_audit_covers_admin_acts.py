"""The audit trail holds more than terminates (issue 43, L8): an agent token issued,
rotated or revoked, a cluster added, approved or refused, and a stack an operator takes
by hand each leave an entry (who, from where, what, what came of it), listed on the
Audit page beside the actions; never the token itself. The detector's own stacks leave
none. An act whose entry cannot be written does not happen."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from dashboard.actions.models import AuditEntry
from dashboard.agents import tokens
from dashboard.agents.models import NodeToken
from dashboard.cluster.models import Cluster
from dashboard.core import audit
from dashboard.trials.models import Experiment, Trial, TrialStack
from dashboard.trials.stacks import request_stack
from tests.conftest import token_client

pytestmark = [pytest.mark.both_backends, pytest.mark.django_db]


def trail() -> list[tuple[str, str, str, str]]:
    return list(AuditEntry.objects.order_by("id").values_list(
        "kind", "target_key", "username", "state"))


def test_token_acts_are_audited_with_who_and_where_and_never_the_token(admin: User) -> None:
    page = Client(REMOTE_ADDR="10.1.2.3")
    page.force_login(admin)
    shown = page.post("/agents/", {"node": "gpu-node-7", "node_ip": "10.0.0.7"})
    [token] = re.findall(r'<code id="new-token">(rwa_[\w-]+)</code>', shown.content.decode())
    row = NodeToken.objects.get()
    page.post("/agents/", {"rotate": str(row.pk)})
    new = NodeToken.objects.exclude(pk=row.pk).get()
    page.post(f"/agents/{new.pk}/revoke")

    key = f"token:{row.prefix}"
    assert trail() == [("issue_token", key, "alice-admin", "succeeded"),
                       ("rotate_token", key, "alice-admin", "succeeded"),
                       ("revoke_token", f"token:{new.prefix}", "alice-admin", "succeeded")]
    issued = AuditEntry.objects.get(kind="issue_token")
    assert issued.address == "10.1.2.3" and issued.user == admin
    assert "gpu-node-7" in issued.outcome and issued.target["node_ip"] == "10.0.0.7"
    rotated = AuditEntry.objects.get(kind="rotate_token")
    assert new.prefix in rotated.outcome
    everything = str(list(AuditEntry.objects.values())) + str(
        list(AuditEntry.objects.values_list("steps__detail", flat=True)))
    assert token not in everything and row.token_hash not in everything
    listed = page.get("/audit/").content.decode()
    assert "issue agent token" in listed and "revoke agent token" in listed
    assert token not in listed


def test_a_token_issued_by_a_command_is_audited_as_the_command() -> None:
    row, _ = tokens.issue("gpu-node-8", None, timezone.now())
    assert trail() == [("issue_token", f"token:{row.prefix}", audit.COMMAND, "succeeded")]


def test_cluster_decisions_are_audited(admin: User) -> None:
    api = token_client(admin)
    added = api.post("/api/clusters/", {"name": "beta", "address": "http://beta-head:8265",
                                        "token": "ray-secret-token"}, format="json",
                     REMOTE_ADDR="10.4.5.6")
    assert added.status_code == 201, added.content
    now = timezone.now()
    Cluster.objects.create(name="gamma", origin=Cluster.REGISTERED, approval=Cluster.PENDING,
                           address="http://gamma-head:8265", first_seen_at=now,
                           state_since=now)
    assert api.post("/api/clusters/gamma/refuse", {}, format="json").status_code == 200
    assert api.post("/api/clusters/gamma/approve", {}, format="json").status_code == 200

    assert trail() == [("add_cluster", "cluster:beta", "alice-admin", "succeeded"),
                       ("refuse_cluster", "cluster:gamma", "alice-admin", "succeeded"),
                       ("approve_cluster", "cluster:gamma", "alice-admin", "succeeded")]
    first = AuditEntry.objects.get(kind="add_cluster")
    assert first.address == "10.4.5.6" and "with a Ray token" in first.outcome
    assert "ray-secret-token" not in str(list(AuditEntry.objects.values()))


def test_a_stack_taken_by_hand_is_audited_and_the_detectors_are_not(operator: User) -> None:
    experiment = Experiment.objects.create(name="search")
    trial = Trial.objects.create(experiment=experiment, trial_id="ab12c_00000",
                                 status="RUNNING", pid=4242, node_ip="10.0.0.9",
                                 hostname="gpu-9")
    request_stack(trial, timezone.now())  # the stall detector's
    assert trail() == []
    reply = token_client(operator).post(f"/api/trials/{trial.pk}/stack",
                                        REMOTE_ADDR="10.7.7.7")
    assert reply.status_code == 202
    # The detector's stack was still pending: the operator was given that one, nothing new.
    assert trail() == [] and not reply.json()["created"]
    Trial.objects.filter(pk=trial.pk).update(pid=4343)
    TrialStack.objects.update(state=TrialStack.FAILED)
    reply = token_client(operator).post(f"/api/trials/{trial.pk}/stack",
                                        REMOTE_ADDR="10.7.7.7")
    assert reply.status_code == 202 and reply.json()["created"]
    assert trail() == [("take_stack", "trial:search/ab12c_00000", "oscar-operator",
                        "succeeded")]
    entry = AuditEntry.objects.get()
    assert entry.address == "10.7.7.7" and entry.target["pid"] == 4343


def test_an_act_that_cannot_be_audited_does_not_happen() -> None:
    from dashboard.actions.audit import write_act
    audit.operator_act.disconnect(sender=audit.Act, dispatch_uid="raywatch-audit-trail")
    try:
        with pytest.raises(RuntimeError, match="no audit trail"):
            tokens.issue("gpu-node-9", None, timezone.now())
        assert not NodeToken.objects.exists()
    finally:
        audit.operator_act.connect(write_act, sender=audit.Act,
                                   dispatch_uid="raywatch-audit-trail")
