from __future__ import annotations

from typing import Any

from dashboard.cluster.state import demands_payload
from dashboard.core.consumers import LiveConsumer
from dashboard.core.push import DEMANDS_GROUP, GPUS_GROUP, rows_in_cluster
from dashboard.gpus.views_data import gpu_payload, gpus_in


class GpusConsumer(LiveConsumer):
    """The GPU wall, node and GPU pages: every GPU's latest tile, pushed per node poll."""

    topics = (GPUS_GROUP,)

    def page_snapshot(self) -> dict[str, Any]:
        return {"gpus": {"gpus": gpu_payload(gpus_in(self.cluster or None)), "complete": True}}


class DemandsConsumer(LiveConsumer):
    topics = (DEMANDS_GROUP,)

    def page_snapshot(self) -> dict[str, Any]:
        demands = demands_payload()
        return {"demands": rows_in_cluster(demands, self.cluster) if self.cluster else demands}
