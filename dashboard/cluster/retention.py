"""Ended clusters are kept RAYWATCH_ENDED_CLUSTER_KEEP_D days (or their own keep_days) after
they ended, then deleted with everything stored of them: nodes, actors, jobs, demand,
experiments with their trials and results, incidents, the node tokens issued for them.
The audit trail stays (it names the cluster in each entry's target). The cluster
RAY_ADDRESS points at is never deleted."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from dashboard.cluster.models import Cluster

log = logging.getLogger(__name__)
# What the apps above this one delete of a cluster ahead of it, in batches of their own
# (dashboard.trials: its results, millions for a month of a big search): registered in
# their AppConfig.ready(), as this app does not import them. The cascade takes the rest.
_ahead: list[Callable[[Cluster], None]] = []


def register_ahead(delete: Callable[[Cluster], None]) -> None:
    if delete not in _ahead:
        _ahead.append(delete)


def forget_ended(now: datetime) -> list[str]:
    """Delete the ended clusters past their keep; their names."""
    forgotten = []
    ended = Cluster.objects.filter(state=Cluster.ENDED, ended_at__isnull=False).exclude(
        name=settings.CLUSTER_NAME)
    for cluster in ended:
        keep = cluster.keep_days if cluster.keep_days is not None else \
            settings.ENDED_CLUSTER_KEEP_D
        if keep <= 0 or cluster.ended_at > now - timedelta(days=keep):
            continue
        for delete in _ahead:
            delete(cluster)
        with transaction.atomic():
            cluster.delete()  # the rest goes with it (on_delete=CASCADE)
        log.warning("cluster %s ended %s and was kept %d days: deleted", cluster.name,
                    f"{cluster.ended_at:%Y-%m-%d}", keep)
        forgotten.append(cluster.name)
    return forgotten
