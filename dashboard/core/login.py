"""Failed logins are limited per username and per client address.

Failures are counted in Django's cache (Redis in production, so every web process
shares the counts) whatever the login path: `user_login_failed` counts, and the
first authentication backend refuses while a budget is spent, so the admin's own
login form is covered too. The login page answers 429 with how long to wait. A
success clears its username's count, not its address's: someone who holds one
account cannot launder guesses at other accounts through it.
"""

from __future__ import annotations

import hashlib
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
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse

log = logging.getLogger(__name__)

UNAVAILABLE = ("Login is paused: raywatch cannot reach Redis, where it counts failed logins. "
               "Try again when Redis is back.")


class LimiterUnavailable(Exception):
    """The cache that holds the counts cannot be reached."""


@dataclass(frozen=True)
class Budget:
    """Failures of one username, or from one address, within the window."""

    kind: str  # "user" or "address"
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


def budgets(username: str | None, address: str | None) -> list[Budget]:
    # Normalised as Django's login form does, so both spellings share a count.
    name = unicodedata.normalize("NFKC", username or "").strip()
    found = [Budget("user", name, settings.LOGIN_FAILURES_PER_USER)] if name else []
    if address:
        found.append(Budget("address", address, settings.LOGIN_FAILURES_PER_ADDRESS))
    return found


def wait_s(username: str | None, address: str | None, now: float) -> int:
    return max((b.wait_s(now) for b in budgets(username, address)), default=0)


def client_address(request: HttpRequest | None) -> str | None:
    """The client's address; behind a proxy listed in RAYWATCH_TRUSTED_PROXIES uvicorn
    has already put the X-Forwarded-For client here."""
    if request is None:
        return None
    return request.META.get("REMOTE_ADDR") or None


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
        for budget in budgets(user.get_username(), None):
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
            refused = wait_s(username, client_address(request), time.time()) > 0
        except LimiterUnavailable:
            refused = True
        if refused:
            raise PermissionDenied("too many failed logins")


class RateLimitedLoginView(LoginView):
    """Django's login page, answering 429 "try again in N s" while over budget."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            wait = wait_s(request.POST.get("username"), client_address(request), time.time())
        except LimiterUnavailable:
            return self.refuse(503, UNAVAILABLE)
        if wait:
            response = self.refuse(429, f"Too many failed logins, try again in {wait} s.")
            response["Retry-After"] = str(wait)
            return response
        return super().post(request, *args, **kwargs)

    def refuse(self, status: int, message: str) -> HttpResponse:
        # An unbound form: a bound one would try the password while rendering.
        context = self.get_context_data(form=self.get_form_class()(self.request),
                                        refused=message)
        return self.render_to_response(context, status=status)
