from __future__ import annotations

from typing import Any

from dashboard.core.consumers import LiveConsumer
from dashboard.core.push import CLUSTER_GROUP, DEMANDS_GROUP, EXPERIMENTS_GROUP, GPUS_GROUP
from dashboard.triage.data import triage_payload


class TriageConsumer(LiveConsumer):
    """The home page's socket: the triage on (re)connect; afterwards any change to the
    cluster, demand, GPUs, trials or incidents tells the page to fetch it again."""

    topics = (CLUSTER_GROUP, DEMANDS_GROUP, GPUS_GROUP, EXPERIMENTS_GROUP)

    def page_snapshot(self) -> dict[str, Any]:
        return {"triage": triage_payload(cluster=self.cluster or None)}
