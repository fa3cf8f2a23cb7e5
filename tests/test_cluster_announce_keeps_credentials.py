"""A head agent's announcement never changes where raywatch sends a cluster's Ray token.
A node token that claims another GCS address or dashboard URL for a cluster raywatch
knows (by its session, its KubeRay name) changes neither: the claim shows on the
cluster's row for an admin to decide, and a terminate still goes to the GCS the admin
gave (or none). A Ray token lets its holder submit jobs: code on that cluster."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from dashboard.cluster.endpoint import endpoint_of, gcs_of
from dashboard.cluster.models import Cluster, ClusterSession
from dashboard.cluster.registry import add_cluster, announce
from tests.conftest import token_client

pytestmark = pytest.mark.django_db
RAY_TOKEN = "beta-ray-token-4c2e"
SESSION = "session_2026-11-02_10-00-00_000001_1"
ROGUE_GCS, ROGUE_URL = "10.6.6.6:6379", "http://10.6.6.6:8265"


@pytest.fixture
def beta() -> Cluster:
    """A cluster an admin added with its dashboard URL and Ray token, no GCS address;
    polled, so raywatch knows its session."""
    now = timezone.now()
    cluster = add_cluster("beta", "http://beta-head:8265", RAY_TOKEN, now)
    ClusterSession.objects.create(cluster=cluster, session_name=SESSION, first_seen_at=now,
                                  last_seen_at=now)
    return cluster


def rogue_announcement(**changes: str) -> dict:
    return {"dashboard_url": ROGUE_URL, "gcs_address": ROGUE_GCS, "session_name": SESSION,
            "node_ip": "10.6.6.6", **changes}


def row(admin, name: str) -> dict:  # type: ignore[no-untyped-def]
    reply = token_client(admin).get("/api/clusters/")
    assert reply.status_code == 200
    return next(r for r in reply.json() if r["name"] == name)


def test_an_announcement_does_not_give_a_cluster_a_gcs_address(beta: Cluster, admin) -> None:  # type: ignore[no-untyped-def]
    announce("rogue123", rogue_announcement(), timezone.now())
    # Where a terminate would send beta's Ray token: nowhere new.
    assert gcs_of("beta") is None
    endpoint = endpoint_of("beta")
    assert (endpoint.dashboard_url, endpoint.token) == ("http://beta-head:8265", RAY_TOKEN)
    shown = row(admin, "beta")
    assert shown["gcs_address"] == "" and shown["dashboard_url"] == "http://beta-head:8265"
    # The claim waits for an admin, with who made it.
    assert shown["claim"]["gcs_address"] == ROGUE_GCS
    assert shown["claim"]["dashboard_url"] == ROGUE_URL
    assert shown["claim"]["by"] == "rogue123"


def test_an_announcement_does_not_replace_a_gcs_address_an_admin_gave(admin) -> None:  # type: ignore[no-untyped-def]
    now = timezone.now()
    add_cluster("gamma", "http://gamma-head:8265", RAY_TOKEN, now, gcs_address="gamma-head:6379")
    Cluster.objects.filter(name="gamma").update(kuberay={"name": "gamma", "namespace": "ml"})
    announce("rogue123", rogue_announcement(session_name="", kuberay={"name": "gamma",
                                                                      "namespace": "ml"}), now)
    assert gcs_of("gamma") == "gamma-head:6379"
    assert endpoint_of("gamma").dashboard_url == "http://gamma-head:8265"
    assert row(admin, "gamma")["claim"]["gcs_address"] == ROGUE_GCS


def test_an_admin_takes_the_claimed_gcs_address_or_dismisses_the_claim(beta: Cluster,  # type: ignore[no-untyped-def]
                                                                       admin) -> None:
    now = timezone.now()
    announce("head0001", rogue_announcement(dashboard_url="http://beta-head:8265"), now)
    assert row(admin, "beta")["claim"] == {"gcs_address": ROGUE_GCS, "by": "head0001",
                                           "at": now.isoformat()}
    reply = token_client(admin).post("/api/clusters/beta/approve",
                                     {"gcs_address": ROGUE_GCS}, format="json")
    assert reply.status_code == 200, reply.content
    assert gcs_of("beta") == ROGUE_GCS and reply.json()["claim"] is None
    # The same announcement again raises nothing; another address does, for an admin.
    announce("head0001", rogue_announcement(dashboard_url="http://beta-head:8265"),
             now + timedelta(seconds=1))
    assert row(admin, "beta")["claim"] is None
    announce("head0001", rogue_announcement(gcs_address="10.7.7.7:6379",
                                            dashboard_url="http://beta-head:8265"),
             now + timedelta(seconds=2))
    assert row(admin, "beta")["claim"]["gcs_address"] == "10.7.7.7:6379"
    call_command("cluster", "approve", "beta")  # seen: keep what beta has
    assert row(admin, "beta")["claim"] is None and gcs_of("beta") == ROGUE_GCS
    announce("head0001", rogue_announcement(gcs_address="10.7.7.7:6379",
                                            dashboard_url="http://beta-head:8265"),
             now + timedelta(seconds=3))
    assert row(admin, "beta")["claim"] is None and gcs_of("beta") == ROGUE_GCS

