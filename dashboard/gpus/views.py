from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from dashboard.cluster.models import Node
from dashboard.cluster.scope import page_cluster
from dashboard.cluster.serializers import NodeSerializer
from dashboard.cluster.views_data import demands_payload
from dashboard.core.push import rows_in_cluster
from dashboard.core.roles import ADMIN, has_role
from dashboard.core.views import viewer_required
from dashboard.gpus.models import Gpu
from dashboard.gpus.views_data import gpu_payload
from dashboard.gpus.wall import WallQuery, wall_page
from dashboard.trials.table import BadQuery


@viewer_required
def gpu_wall(request: HttpRequest) -> HttpResponse:
    """The first page of the wall (or the one the address asks for; a bad parameter
    falls back to the defaults, and the page's own fetch then names it)."""
    scope = page_cluster(request)
    try:
        query = WallQuery.from_params(request.GET)
    except BadQuery:
        query = WallQuery()
    return render(request, "gpus/wall.html",
                  {"wall": wall_page(scope.name if scope else None, query)})


@viewer_required
def gpu_page(request: HttpRequest, uuid: str) -> HttpResponse:
    gpu = get_object_or_404(Gpu, uuid=uuid)
    return render(request, "gpus/gpu.html", {"gpu": gpu, "tile": gpu_payload([gpu])[0],
                                             "can_kill": has_role(request.user, ADMIN)})


@viewer_required
def node_page(request: HttpRequest, node_id: str) -> HttpResponse:
    node = get_object_or_404(Node, node_id=node_id)
    gpus = gpu_payload(Gpu.objects.filter(node_ip=node.node_ip)) if node.node_ip else []
    return render(request, "gpus/node.html",
                  {"node": node, "node_data": NodeSerializer(node).data, "gpus": gpus})


@viewer_required
def demands_page(request: HttpRequest) -> HttpResponse:
    scope = page_cluster(request)
    demands = demands_payload()
    if scope is not None:
        demands = rows_in_cluster(demands, scope.name)
    return render(request, "gpus/demands.html", {"demands": demands})
