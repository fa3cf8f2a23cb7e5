"""The GPU wall a page of nodes at a time: filtered and paged here, so a cluster of 512
nodes x 8 GPUs sends the browser the few hundred tiles it shows, not 4,096.

A page holds whole nodes (a node's GPUs are never split), in node-name order. The
filter matches what a tile shows (node, address, owner, GPU name, uuid: every word)
and the state chips pick states; a node is on the wall when one of its GPUs matches,
and only its matching tiles are shown. The state counts are the whole wall's. Every
tile's state needs its processes' owners, so each node's tiles are kept between requests
(paging, filtering, the open pages' refreshes) and built again when its rows changed.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from django.db.models import Count, Max

from dashboard.gpus.models import GpuProcess
from dashboard.gpus.views_data import GPU_STATES, gpu_payload, gpus_in
from dashboard.trials.table import BadQuery

NODES_A_PAGE, MAX_NODES_A_PAGE = 32, 200
MAX_TEXT = 200
TILES_KEEP_S = 5.0

_LOCK = threading.Lock()
# cluster name ("": all) -> node -> (when built, the rows' stamp it was built from, tiles)
_TILES: dict[str, dict[str, tuple[float, tuple[Any, ...], list[dict[str, Any]]]]] = {}


@dataclass(frozen=True)
class WallQuery:
    text: str = ""
    states: tuple[str, ...] = ()
    page: int = 1
    per_page: int = NODES_A_PAGE

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> WallQuery:
        errors: dict[str, str] = {}
        text = (params.get("q") or "").strip()
        if len(text) > MAX_TEXT:
            errors["q"] = f"at most {MAX_TEXT} characters"
        states = tuple(s for s in (params.get("state") or "").split(",") if s)
        if unknown := [s for s in states if s not in GPU_STATES]:
            errors["state"] = (f"{', '.join(unknown)}: not a state; states are "
                               + ", ".join(GPU_STATES) + " (comma-separated)")
        page = _whole(params, "page", 1, 1, None, errors)
        per_page = _whole(params, "per_page", NODES_A_PAGE, 1, MAX_NODES_A_PAGE, errors)
        if errors:
            raise BadQuery(errors)
        return cls(text=text, states=states, page=page, per_page=per_page)


def _whole(params: Mapping[str, str], name: str, default: int, low: int, high: int | None,
           errors: dict[str, str]) -> int:
    raw = params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if value < low or (high is not None and value > high):
        errors[name] = f"a whole number from {low}" + (f" to {high}" if high else "")
    return value


def wall_page(cluster: str | None, query: WallQuery) -> dict[str, Any]:
    tiles = cluster_tiles(cluster or "")
    words = query.text.lower().split()
    chosen = set(query.states)
    by_node: dict[str, list[dict[str, Any]]] = {}
    for tile in tiles:
        if (not chosen or tile["state"] in chosen) and all(w in _search(tile) for w in words):
            by_node.setdefault(tile["node"], []).append(tile)
    nodes = sorted(by_node)
    pages = max(1, math.ceil(len(nodes) / query.per_page))
    page = min(query.page, pages)
    shown = nodes[(page - 1) * query.per_page:page * query.per_page]
    return {
        "tiles": [t for node in shown for t in by_node[node]],
        "page_nodes": shown, "page": page, "pages": pages, "per_page": query.per_page,
        "nodes": {"matched": len(nodes), "total": len({t["node"] for t in tiles})},
        "gpus": {"matched": sum(len(v) for v in by_node.values()), "total": len(tiles)},
        "states": dict(Counter(t["state"] for t in tiles)),
        "simulated": any(t["simulated"] for t in tiles),
        "query": {**asdict(query), "states": list(query.states)},
    }


def cluster_tiles(cluster: str) -> list[dict[str, Any]]:
    """Every tile of the cluster ("": all), by node and index. A node's tiles are built
    again when its GPU or process rows changed (its poll, a kill) or after TILES_KEEP_S
    (a tile turns stale by the clock alone, an owner with Ray's view): at 512 nodes
    polled each second a request builds the tiles of the nodes polled since the last
    one, not all 4,096."""
    gpus = gpus_in(cluster or None)
    stamps = {row.pop("node"): tuple(row.values()) for row in gpus.values("node").annotate(
        n=Count("id"), at=Max("at"), top=Max("id")).order_by()}
    for row in GpuProcess.objects.filter(gpu__in=gpus).values("gpu__node").annotate(
            n=Count("id"), top=Max("id")).order_by():
        node = row.pop("gpu__node")
        stamps[node] = (*stamps.get(node, ()), *row.values())
    now = time.monotonic()
    with _LOCK:
        kept = dict(_TILES.get(cluster, {}))
    fresh = {node: entry for node, entry in kept.items()
             if node in stamps and entry[1] == stamps[node] and now - entry[0] < TILES_KEEP_S}
    if stale := sorted(set(stamps) - set(fresh)):
        built: dict[str, list[dict[str, Any]]] = {node: [] for node in stale}
        for tile in gpu_payload(gpus.filter(node__in=stale).order_by("node", "index", "id")):
            built[tile["node"]].append(tile)
        fresh.update((node, (now, stamps[node], built[node])) for node in stale)
    with _LOCK:
        _TILES[cluster] = fresh
    return [tile for node in sorted(fresh) for tile in fresh[node][2]]


def _search(tile: dict[str, Any]) -> str:
    """What the wall's filter matches in a tile, as gputiles.js builds it."""
    return " ".join(str(tile.get(k) or "") for k in ("node", "node_ip", "owner", "name",
                                                     "uuid")).lower()
