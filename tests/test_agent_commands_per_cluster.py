"""A command is for one node of one cluster: two clusters that each name a node "gpu-1"
(as every cluster's first GPU node may be named) never get each other's commands, and
neither can answer the other's. Nor do they share what their agents watch: one's process
snapshot neither replaces the other's nor pins the start time of the other's action."""

from __future__ import annotations

import pytest
from django.utils import timezone

from collectors.agent import wire
from dashboard.agents import tokens
from dashboard.agents.commands import create_signal, hand_out, take_result
from dashboard.agents.ingest import ingest_sent
from dashboard.agents.models import NodeProcess
from dashboard.agents.remote import reported_start
from dashboard.cluster.models import Cluster
from dashboard.core.errors import ApiError
from tests.agents import batches, fact, sent

# On SQLite too: same-named nodes of two clusters
pytestmark = [pytest.mark.both_backends, pytest.mark.django_db]


def test_a_node_of_the_same_name_in_another_cluster_gets_none_of_its_commands() -> None:
    now = timezone.now()
    Cluster.objects.create(name="beta", first_seen_at=now, state_since=now)
    mine, _ = tokens.issue("gpu-1", None, now, "10.0.0.1")  # the default cluster's gpu-1
    theirs, _ = tokens.issue("gpu-1", None, now, "10.1.0.1", cluster="beta")
    command = create_signal(None, "gpu-1", 4242, "SIGTERM", 1234.5, now, cluster="beta")
    assert hand_out(mine, now) == []
    [given] = hand_out(theirs, now)
    assert given["id"] == command.pk and given["payload"]["pid"] == 4242
    with pytest.raises(ApiError, match="no command"):  # nor can it answer for them
        take_result(mine, command.pk, {"version": wire.VERSION, "outcome": "gone",
                                       "detail": "", "nonce": given["nonce"]}, now)
    done = take_result(theirs, command.pk, {"version": wire.VERSION, "outcome": "signalled",
                                            "detail": "SIGTERM sent", "nonce": given["nonce"]},
                       now)
    assert done.outcome == "signalled"


def test_same_named_nodes_of_two_clusters_keep_their_own_processes() -> None:
    now = timezone.now()
    Cluster.objects.create(name="beta", first_seen_at=now, state_since=now)
    mine = tokens.issue("gpu-1", None, now, "10.0.0.1")[1]
    theirs = tokens.issue("gpu-1", None, now, "10.1.0.1", cluster="beta")[1]
    ours_first = {**fact(4242), "create_time": 100.0}
    ingest_sent([sent(mine, batches([], processes=[ours_first]))], now)
    # Their gpu-1 lists the same pid, started at another time, and nothing of ours.
    theirs_too = {**fact(4242), "create_time": 999.0}
    ingest_sent([sent(theirs, batches([], processes=[theirs_too, fact(7)]))], now)

    kept = sorted(NodeProcess.objects.values_list("cluster__name", "pid", "create_time"))
    default = Cluster.objects.exclude(name="beta").get().name
    assert kept == sorted([(default, 4242, 100.0), ("beta", 4242, 999.0), ("beta", 7, 1.0)])
    assert reported_start("gpu-1", 4242, default) == 100.0
    assert reported_start("gpu-1", 4242, "beta") == 999.0


def test_a_token_cannot_take_another_nodes_address() -> None:
    """Issue 43, L2: a node's address is pinned by its token's first report, and a token
    of another node of the cluster cannot pin that same address (it would then get that
    node's commands and processes by address). Once that token is revoked, it can."""
    from dashboard.agents.models import NodeToken
    from tests.agents import gpu_record, report_body

    now = timezone.now()
    first = tokens.issue("gpu-a", None, now)[1]
    [answer] = ingest_sent([sent(first, report_body(1, [gpu_record("GPU-a-0")], agent={
        "version": "t", "node_ip": "10.0.0.1"}))], now)
    assert isinstance(answer, dict) and NodeToken.objects.get(node="gpu-a").node_ip == \
        "10.0.0.1"
    _, second_secret = tokens.issue("gpu-b", None, now)
    [refused] = ingest_sent([sent(second_secret, report_body(1, [gpu_record("GPU-b-0")], agent={
        "version": "t", "node_ip": "10.0.0.1"}))], now)
    assert not isinstance(refused, dict) and "is node 'gpu-a''s" in str(refused), refused
    assert NodeToken.objects.get(node="gpu-b").node_ip == ""
    NodeToken.objects.filter(node="gpu-a").update(revoked_at=now)
    [answer] = ingest_sent([sent(second_secret, report_body(1, [gpu_record("GPU-b-0")], agent={
        "version": "t", "node_ip": "10.0.0.1"}))], now)
    assert isinstance(answer, dict), answer
    assert NodeToken.objects.get(node="gpu-b").node_ip == "10.0.0.1"
