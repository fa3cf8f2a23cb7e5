"""An ended cluster is kept RAYWATCH_ENDED_CLUSTER_KEEP_D days after it ended (or as long
as `manage.py cluster keep` says), then deleted with what was stored of it; the others,
and the cluster RAY_ADDRESS points at, stay."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from dashboard.cluster.models import Cluster, Node
from dashboard.cluster.tasks import forget_ended_clusters
from dashboard.incidents.models import Incident
from dashboard.trials.models import Experiment, StepResult, Trial

pytestmark = pytest.mark.django_db


def cluster_with_history(name: str, ended_days_ago: float | None) -> Cluster:
    now = timezone.now()
    ended = now - timedelta(days=ended_days_ago) if ended_days_ago is not None else None
    cluster = Cluster.objects.create(
        name=name, first_seen_at=now - timedelta(days=400), state_since=ended or now,
        state=Cluster.ENDED if ended else Cluster.ACTIVE, ended_at=ended)
    Node.objects.create(cluster=cluster, node_id=f"{name}-node", node_ip="10.0.0.1",
                        state="DEAD", last_seen_at=now)
    experiment = Experiment.objects.create(cluster=cluster, name="search")
    trial = Trial.objects.create(experiment=experiment, trial_id="t_00000")
    StepResult.objects.bulk_create([
        StepResult(trial=trial, attempt=1, iteration=i, ingested_at=now, metrics={})
        for i in range(1, 51)])
    Incident.objects.create(cluster=cluster, kind="trial_stalled", subject="trial:search/t",
                            summary="stalled", opened_at=now, updated_at=now, trial=trial)
    return cluster


def names() -> list[str]:
    return sorted(Cluster.objects.values_list("name", flat=True))


def test_only_ended_clusters_past_their_keep_are_deleted_with_their_history(settings) -> None:  # type: ignore[no-untyped-def]
    settings.CLUSTER_NAME, settings.ENDED_CLUSTER_KEEP_D = "home", 90
    cluster_with_history("home", 400)  # RAY_ADDRESS's: never deleted
    cluster_with_history("old", 91)
    cluster_with_history("recent", 89)
    cluster_with_history("alive", None)
    cluster_with_history("pinned", 300)
    call_command("cluster", "keep", "pinned", "0")  # kept for ever
    assert forget_ended_clusters() == ["old"]
    assert names() == ["alive", "home", "pinned", "recent"]
    assert not Experiment.objects.filter(cluster__name="old").exists()
    assert StepResult.objects.count() == 4 * 50  # "old"'s 50 results went, nobody else's
    assert Node.objects.count() == Incident.objects.count() == 4
    assert forget_ended_clusters() == []  # nothing more to do


def test_a_cluster_kept_longer_than_the_default_stays(settings) -> None:  # type: ignore[no-untyped-def]
    settings.ENDED_CLUSTER_KEEP_D = 30
    cluster_with_history("long", 60)
    call_command("cluster", "keep", "long", "365")
    assert forget_ended_clusters() == []
    call_command("cluster", "keep", "long", "default")
    assert forget_ended_clusters() == ["long"] and names() in ([], ["default"])
