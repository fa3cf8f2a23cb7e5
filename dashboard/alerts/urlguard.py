"""Where raywatch may send webhooks: http(s) only, and by default not to loopback,
link-local, private or otherwise non-public addresses (the SSRF guard).

Checked when a channel is saved (a clear error for the admin) and again on the
socket actually connected at send time, so a name that re-resolves to an
internal address later (DNS rebinding) is refused too.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import SplitResult, urlsplit

ALLOW_PRIVATE_HINT = "set RAYWATCH_WEBHOOK_ALLOW_PRIVATE=1 to allow internal addresses"


class InvalidUrl(ValueError):
    pass


def split_url(url: str) -> SplitResult:
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018  (raises on a malformed port)
    except ValueError as exc:
        raise InvalidUrl(f"not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidUrl("only http:// and https:// URLs are allowed")
    if not parts.hostname:
        raise InvalidUrl("the URL has no host")
    return parts


def address_problem(address: str) -> str | None:
    """Why this IP address is not a public one, or None when it is."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    for name in ("loopback", "link_local", "private", "multicast", "reserved", "unspecified"):
        if getattr(ip, f"is_{name}"):
            return f"{address} is a {name.replace('_', '-')} address"
    if not ip.is_global:
        return f"{address} is not a public address"
    return None


def check_url(url: str, allow_private: bool, resolve: bool = True) -> str:
    """The URL, stripped, or InvalidUrl saying what is wrong with it."""
    parts = split_url(url)
    if allow_private or not resolve:
        return url.strip()
    try:
        infos = socket.getaddrinfo(parts.hostname, parts.port or 443, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise InvalidUrl(f"cannot resolve {parts.hostname}: {exc}") from None
    for info in infos:
        problem = address_problem(str(info[4][0]))
        if problem:
            raise InvalidUrl(f"{parts.hostname}: {problem}; {ALLOW_PRIVATE_HINT}")
    return url.strip()


def mask_url(url: str) -> str:
    """Enough to recognise a webhook URL, not enough to use it: chat webhook URLs are
    credentials (the path carries the token)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(invalid URL)"
    path = parts.path or "/"
    tail = path[-4:] if len(path) > 12 else ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname or '?'}{port}/…{tail}"
