"""Lists and APIs scoped to one cluster: `?cluster=NAME` (all clusters when absent)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest
from drf_spectacular.utils import OpenApiParameter
from rest_framework.exceptions import ValidationError

from dashboard.cluster.models import Cluster

CLUSTER_PARAMETER = OpenApiParameter(
    "cluster", str, description="only what belongs to this cluster (its name); all when absent")


def requested_cluster(params: dict[str, str] | object) -> Cluster | None:
    """The cluster `?cluster=` names, None when it names none; a name raywatch does not
    know is a 400 that lists the ones it does."""
    name = (params.get("cluster") or "").strip()  # type: ignore[attr-defined]
    if not name:
        return None
    cluster = Cluster.objects.filter(name=name).first()
    if cluster is None:
        known = ", ".join(Cluster.objects.values_list("name", flat=True)[:50]) or "none yet"
        raise ValidationError({"cluster": f"no cluster named {name!r} (known: {known})"})
    return cluster


def scoped(rows: QuerySet, params: dict[str, str] | object, path: str = "cluster") -> QuerySet:
    """`rows` of the cluster `?cluster=` names (`path`: how a row reaches its cluster)."""
    cluster = requested_cluster(params)
    return rows if cluster is None else rows.filter(**{path: cluster})


# The header's switcher remembers the chosen cluster in this cookie; `?cluster=` on a page
# overrides it ("all": every cluster).
COOKIE = "raywatch_cluster"


def page_cluster(request: HttpRequest) -> Cluster | None:
    """The cluster a page is scoped to, None for all clusters (or a name not known)."""
    asked = request.GET["cluster"] if "cluster" in request.GET else request.COOKIES.get(COOKIE)
    name = (asked or "").strip()
    if not name or name == "all":
        return None
    return Cluster.objects.filter(name=name).first()


def switcher(request: HttpRequest) -> dict[str, Any]:
    """The header's cluster switcher: shown once raywatch knows more than one cluster."""
    if not request.user.is_authenticated:
        return {}
    try:
        clusters = list(Cluster.objects.values_list("name", "state"))
        chosen = page_cluster(request) if len(clusters) > 1 else None
    except Exception:  # a page still renders when the database hiccups
        return {}
    return {"clusters": [{"name": n, "state": s} for n, s in clusters],
            "scope_cluster": chosen.name if chosen else ""}
