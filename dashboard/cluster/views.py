from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from dashboard.cluster.state import cluster_payload
from dashboard.core.views import viewer_required


@viewer_required
def cluster_page(request: HttpRequest) -> HttpResponse:
    return render(request, "cluster/overview.html", {"cluster": cluster_payload()})
