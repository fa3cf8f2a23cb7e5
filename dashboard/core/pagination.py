"""Pages for the API's lists: `?page=N&page_size=M`, the list itself stays the body.

As GitHub's API does it: the body is the page's items (the shape every client already
reads), and the headers say where the rest is: `Link: <…>; rel="next"`, `rel="prev"`,
`rel="first"`, `rel="last"` (RFC 8288) and `X-Total-Count`. `page_size` defaults to
DEFAULT_PAGE_SIZE; a larger one than MAX_PAGE_SIZE is clamped to it (X-Page-Size says
what was used); one that is not a whole number from 1 up is answered 400.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE = 100, 1000

PAGE_PARAMETERS = [
    OpenApiParameter("page", {"type": "integer", "minimum": 1}, description="1 (default) up"),
    OpenApiParameter("page_size", {"type": "integer", "minimum": 1},
                     description=f"items a page: {DEFAULT_PAGE_SIZE} by default, at most "
                                 f"{MAX_PAGE_SIZE} (larger is clamped)"),
]


class HeaderPagination(PageNumberPagination):
    page_size = DEFAULT_PAGE_SIZE
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE

    def get_page_size(self, request: Request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None or raw == "":
            return self.page_size
        if not raw.isdigit() or int(raw) < 1:
            raise ValidationError({"page_size": f"a whole number from 1 (at most "
                                                f"{MAX_PAGE_SIZE} are returned)"})
        return min(int(raw), MAX_PAGE_SIZE)

    def get_paginated_response(self, data: Any) -> Response:
        page = self.page
        links = [(self.get_next_link(), "next"), (self.get_previous_link(), "prev")]
        url = self.request.build_absolute_uri()
        links += [(_with_page(url, 1), "first"),
                  (_with_page(url, page.paginator.num_pages), "last")]
        return Response(data, headers={
            "Link": ", ".join(f'<{href}>; rel="{rel}"' for href, rel in links if href),
            "X-Total-Count": str(page.paginator.count),
            "X-Page-Size": str(page.paginator.per_page),
        })


def paginated(request: Request, items: QuerySet[Any] | Sequence[Any],
              serialize: Callable[[list[Any]], Any]) -> Response:
    """One page of `items` (ordered), serialized, with the paging headers."""
    paginator = HeaderPagination()
    page = paginator.paginate_queryset(items, request)  # type: ignore[arg-type]
    return paginator.get_paginated_response(serialize(list(page or [])))


def _with_page(url: str, number: int) -> str:
    return replace_query_param(url, "page", number)
