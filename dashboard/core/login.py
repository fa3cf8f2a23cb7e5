"""Failed logins are limited per username from one address, per client address, and
per username from everywhere together; none of them lets a stranger lock a user out.

A username's own count is kept per address: guesses at the admin's password from one
place do not stop the admin logging in from another. Guesses spread over many
addresses meet the username's count from everywhere, which refuses only browsers that
never logged in as that user: a successful login on the login page leaves a signed
cookie naming its user (KNOWN_BROWSER_COOKIE), and that browser is let past this one
count (the others still apply).

Failures are counted in Django's cache (Redis in production, so every web process
shares the counts) whatever the login path: `user_login_failed` counts, and the
first authentication backend refuses while a budget is spent, so the admin's own
login form is covered too. The login page answers 429 with how long to wait. A
success clears its username's count at its address, not its address's: someone who
holds one account cannot launder guesses at other accounts through it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import math
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import user_logged_in, user_login_failed
from django.contrib.auth.views import LoginView
from django.core import signing
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse

log = logging.getLogger(__name__)

KNOWN_BROWSER_COOKIE = "raywatch_known_login"
KNOWN_BROWSER_SALT = "raywatch.login.known-browser"
UNAVAILABLE = ("Login is paused: raywatch cannot reach Redis, where it counts failed logins. "
               "Try again when Redis is back.")


class LimiterUnavailable(Exception):
    """The cache that holds the counts cannot be reached."""


@dataclass(frozen=True)
class Budget:
    """Failures of one username from one address, from one address, or of one username
    from everywhere, within the window."""

    kind: str  # "user-address", "address" or "user"
    value: str
    limit: int

    @property
    def key(self) -> str:
        digest = hashlib.sha256(self.value.encode()).hexdigest()[:32]
        return f"login-failures:{self.kind}:{digest}"

    def wait_s(self, now: float) -> int:
        """Seconds until the next try is allowed; 0 when it is allowed now."""
        got = _cache(cache.get_many, [self.key, f"{self.key}:since"])
        since = got.get(f"{self.key}:since")
        if got.get(self.key, 0) < self.limit or since is None:
            return 0
        # The cache expires the count by itself; this covers a count that outlives its window.
        return max(0, math.ceil(since + settings.LOGIN_FAILURE_WINDOW_S - now))

    def fail(self, now: float) -> None:
        window = settings.LOGIN_FAILURE_WINDOW_S
        _cache(cache.add, f"{self.key}:since", now, window)
        _cache(cache.add, self.key, 0, window)
        try:
            _cache(cache.incr, self.key)
        except ValueError:  # expired between add and incr
            _cache(cache.set, self.key, 1, window)

    def clear(self) -> None:
        _cache(cache.delete_many, [self.key, f"{self.key}:since"])


def normalised(username: str | None) -> str:
    """As Django's login form does it, so both spellings share a count."""
    return unicodedata.normalize("NFKC", username or "").strip()


def budgets(username: str | None, address: str | None) -> list[Budget]:
    name = normalised(username)
    found = []
    if name and address:
        found.append(Budget("user-address", f"{name}\0{address}",
                            settings.LOGIN_FAILURES_PER_USER))
    if address:
        found.append(Budget("address", address, settings.LOGIN_FAILURES_PER_ADDRESS))
    if name:
        found.append(Budget("user", name, settings.LOGIN_FAILURES_PER_USER_ANYWHERE))
    return found


def wait_s(username: str | None, address: str | None, now: float, known_as: str = "") -> int:
    """Seconds before this username may try again from this address, in a browser that
    logged in as `known_as` before (a user's own browser skips its count from
    everywhere)."""
    name = normalised(username)
    return max((b.wait_s(now) for b in budgets(username, address)
                if not (b.kind == "user" and known_as and known_as == name)), default=0)


def known_as(request: HttpRequest | None) -> str:
    """The user this browser logged in as on the login page, if its cookie says so."""
    value = request.COOKIES.get(KNOWN_BROWSER_COOKIE) if request is not None else None
    if not value:
        return ""
    try:
        return str(signing.loads(value, salt=KNOWN_BROWSER_SALT,
                                 max_age=settings.LOGIN_KNOWN_BROWSER_DAYS * 86400))
    except signing.BadSignature:
        return ""


def remember_browser(response: HttpResponse, username: str) -> None:
    response.set_cookie(
        KNOWN_BROWSER_COOKIE, signing.dumps(normalised(username), salt=KNOWN_BROWSER_SALT),
        max_age=settings.LOGIN_KNOWN_BROWSER_DAYS * 86400, httponly=True,
        secure=settings.SESSION_COOKIE_SECURE, samesite="Lax")


def client_address(request: HttpRequest | None) -> str | None:
    """Where the client's failures are counted from: its IPv4 address, or the /64 its
    IPv6 address is in (one host is given a whole /64 and may rotate through it: a budget
    per single address would be 2^64 budgets, issue 43, L8). Behind a proxy listed in
    RAYWATCH_TRUSTED_PROXIES uvicorn has already put the X-Forwarded-For client here."""
    if request is None:
        return None
    address = request.META.get("REMOTE_ADDR") or None
    try:
        parsed = ipaddress.ip_address(address or "")
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:  # ::ffff:a.b.c.d: an IPv4 client
            return str(parsed.ipv4_mapped)
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return str(parsed)


def _cache(call: Callable[..., Any], *args: Any) -> Any:
    try:
        return call(*args)
    except ValueError:
        raise
    except Exception as exc:  # the backend's own errors (redis.ConnectionError, ...)
        raise LimiterUnavailable(str(exc)) from exc


@receiver(user_login_failed)
def count_failure(sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None,
                  **kwargs: Any) -> None:
    try:
        for budget in budgets(credentials.get("username"), client_address(request)):
            budget.fail(time.time())
    except LimiterUnavailable as exc:
        log.warning("cannot count a failed login: %s", exc)


@receiver(user_logged_in)
def clear_user_failures(sender: Any, request: HttpRequest | None, user: Any,
                        **kwargs: Any) -> None:
    try:
        for budget in budgets(user.get_username(), client_address(request)):
            if budget.kind == "user-address":
                budget.clear()
    except LimiterUnavailable as exc:
        log.warning("cannot clear failed logins of %s: %s", user.get_username(), exc)


class FailedLoginGuard:
    """The first authentication backend: refuses while a budget is spent (or cannot be
    read), and otherwise leaves the decision to the next backend.

    It has no `get_user`: it never owns a session. Code that logs a user in without
    naming a backend (`Client.force_login`) takes the first backend that has one, and a
    session recorded under this guard would never authenticate.
    """

    def authenticate(self, request: HttpRequest | None, username: str | None = None,
                     **credentials: Any) -> None:
        try:
            refused = wait_s(username, client_address(request), time.time(),
                             known_as(request)) > 0
        except LimiterUnavailable:
            refused = True
        if refused:
            raise PermissionDenied("too many failed logins")


class RateLimitedLoginView(LoginView):
    """Django's login page, answering 429 "try again in N s" while over budget."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            wait = wait_s(request.POST.get("username"), client_address(request), time.time(),
                          known_as(request))
        except LimiterUnavailable:
            return self.refuse(503, UNAVAILABLE)
        if wait:
            response = self.refuse(429, f"Too many failed logins, try again in {wait} s.")
            response["Retry-After"] = str(wait)
            return response
        return super().post(request, *args, **kwargs)

    def form_valid(self, form: Any) -> HttpResponse:
        response = super().form_valid(form)
        remember_browser(response, form.get_user().get_username())
        return response

    def refuse(self, status: int, message: str) -> HttpResponse:
        # An unbound form: a bound one would try the password while rendering.
        context = self.get_context_data(form=self.get_form_class()(self.request),
                                        refused=message)
        return self.render_to_response(context, status=status)
