from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from dashboard.cluster.scope import page_cluster
from dashboard.cluster.views_data import cluster_payload
from dashboard.core.views import viewer_required


@viewer_required
def cluster_page(request: HttpRequest) -> HttpResponse:
    """One cluster (the header's switcher, or ?cluster=), else the only one, else every
    cluster's overview and nodes."""
    scope = page_cluster(request)
    return render(request, "cluster/overview.html",
                  {"cluster": cluster_payload(scope.name if scope else None, history=True)})
