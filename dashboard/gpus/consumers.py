from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from dashboard.cluster.views_data import demands_payload
from dashboard.core.consumers import LiveConsumer
from dashboard.core.push import DEMANDS_GROUP, GPUS_GROUP, rows_in_cluster
from dashboard.gpus.views_data import gpu_payload, gpus_in
from dashboard.gpus.wall import MAX_NODES_A_PAGE


class GpusConsumer(LiveConsumer):
    """The node and GPU pages: every GPU's latest tile, pushed per node poll.

    The GPU wall shows a page of nodes (`?paged=1`): it says which (a "watch" message
    with their names) and gets only their tiles; of the others it is told how many
    changed (`others`), and fetches its page again, now and then, for the counts. On
    (re)connect its snapshot is empty and asks it to fetch its page."""

    topics = (GPUS_GROUP,)
    paged = False
    watched: frozenset[str] = frozenset()

    async def connect(self) -> None:
        query = parse_qs((self.scope.get("query_string") or b"").decode("latin-1"))
        self.paged = (query.get("paged") or [""])[0] == "1"
        await super().connect()

    def page_snapshot(self) -> dict[str, Any]:
        if self.paged:
            return {"gpus": {"gpus": [], "complete": False, "paged": True}}
        return {"gpus": {"gpus": gpu_payload(gpus_in(self.cluster or None)), "complete": True}}

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "watch":
            nodes = content.get("nodes")
            if isinstance(nodes, list):
                self.watched = frozenset(n for n in nodes[:MAX_NODES_A_PAGE]
                                         if isinstance(n, str))
            return
        await super().receive_json(content, **kwargs)

    async def push(self, event: dict[str, Any]) -> None:
        if not self.paged or event["topic"] != "gpus":
            await super().push(event)
            return
        data = await self.narrowed(event)
        tiles = data.get("gpus") or [] if isinstance(data, dict) else []
        shown = [t for t in tiles if t.get("node") in self.watched]
        if shown or len(tiles) > len(shown):
            await self.send_json({"topic": "gpus", "data": {"gpus": shown, "complete": False},
                                  "others": len(tiles) - len(shown)})


class DemandsConsumer(LiveConsumer):
    topics = (DEMANDS_GROUP,)

    def page_snapshot(self) -> dict[str, Any]:
        demands = demands_payload()
        return {"demands": rows_in_cluster(demands, self.cluster) if self.cluster else demands}
