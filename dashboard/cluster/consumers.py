from __future__ import annotations

from typing import Any

from dashboard.cluster.views_data import cluster_payload, jobs_payload
from dashboard.core.consumers import LiveConsumer
from dashboard.core.push import CLUSTER_GROUP, JOBS_GROUP


class ClusterConsumer(LiveConsumer):
    topics = (CLUSTER_GROUP,)

    def page_snapshot(self) -> dict[str, Any]:
        return {"cluster": cluster_payload(self.cluster or None, history=True)}


class JobsConsumer(LiveConsumer):
    topics = (JOBS_GROUP,)

    def page_snapshot(self) -> dict[str, Any]:
        return {"jobs": jobs_payload(self.cluster or None)}
