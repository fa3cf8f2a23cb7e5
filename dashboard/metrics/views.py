"""GET /metrics for Prometheus: a bearer token (RAYWATCH_METRICS_TOKEN) when one is
set, else only the operator's network (RAYWATCH_METRICS_ALLOW, loopback by default).
No login: a scraper has no session."""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.gzip import gzip_page
from django.views.decorators.http import require_safe
from prometheus_client.exposition import choose_encoder

from dashboard.metrics.collectors import REGISTRY


@require_safe
@gzip_page
def metrics(request: HttpRequest) -> HttpResponse:
    refused = refusal(request)
    if refused is not None:
        return refused
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    try:
        body = encoder(REGISTRY)
    except DatabaseError as exc:
        return _text(503, f"raywatch cannot read its database: {exc}")
    return HttpResponse(body, content_type=content_type)


def refusal(request: HttpRequest) -> HttpResponse | None:
    """Why this request may not scrape, as the answer to give; None when it may."""
    if settings.METRICS_TOKEN:
        if _bearer_matches(request.headers.get("Authorization", ""), settings.METRICS_TOKEN):
            return None
        answer = _text(401, "raywatch's /metrics wants `Authorization: Bearer <token>` with "
                       "the token set in RAYWATCH_METRICS_TOKEN (or RAYWATCH_METRICS_TOKEN_FILE) "
                       "on raywatch.")
        answer["WWW-Authenticate"] = 'Bearer realm="raywatch metrics"'
        return answer
    address = str(request.META.get("REMOTE_ADDR", ""))
    if _allowed(address):
        return None
    return _text(403, f"raywatch's /metrics does not answer {address or 'this client'}: "
                 "without a token it answers only addresses in RAYWATCH_METRICS_ALLOW "
                 "(default: loopback). Add this scraper's address or network there "
                 "(e.g. RAYWATCH_METRICS_ALLOW=10.0.0.0/8), or set RAYWATCH_METRICS_TOKEN and "
                 "send `Authorization: Bearer <token>`.")


def _bearer_matches(header: str, token: str) -> bool:
    scheme, _, sent = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(sent.strip().encode(),
                                                              token.encode())


def _allowed(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return any(ip in network for network in settings.METRICS_ALLOW)


def _text(status: int, message: str) -> HttpResponse:
    return HttpResponse(message + "\n", status=status, content_type="text/plain; charset=utf-8")
