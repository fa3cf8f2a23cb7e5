"""A forgotten cluster's results, deleted ahead of the cluster itself (which
dashboard/cluster/retention.py then deletes, with the rest of what is stored of it, in
one transaction)."""

from __future__ import annotations

from dashboard.cluster.models import Cluster
from dashboard.trials.models import StepResult

BATCH = 20_000  # results deleted a statement at a time: a month of a big search is millions


def delete_results(cluster: Cluster) -> None:
    results = StepResult.objects.filter(trial__experiment__cluster=cluster)
    while ids := list(results.order_by().values_list("id", flat=True)[:BATCH]):
        StepResult.objects.filter(id__in=ids).delete()
