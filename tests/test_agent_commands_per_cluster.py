"""A command is for one node of one cluster: two clusters that each name a node "gpu-1"
(as every cluster's first GPU node may be named) never get each other's commands, and
neither can answer the other's."""

from __future__ import annotations

import pytest
from django.utils import timezone

from collectors.agent import wire
from dashboard.agents import tokens
from dashboard.agents.commands import create_signal, hand_out, take_result
from dashboard.cluster.models import Cluster
from dashboard.core.errors import ApiError

pytestmark = pytest.mark.django_db


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
