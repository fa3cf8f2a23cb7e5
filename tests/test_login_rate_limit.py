"""Guessing passwords is slow: after 5 failed logins for one username from one address
(20 from one address) within 5 minutes, the login page refuses with "try again in N s"
(HTTP 429), even the right password; a success clears the username's count; other users
and other addresses are unaffected; the admin's login form is covered too."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.core.cache import cache
from django.test import Client

from dashboard.core.login import budgets
from tests.conftest import PASSWORD, log_in, logged_in

ATTACKER = "198.51.100.7"
OFFICE = "203.0.113.20"
V6_HOST = "2001:db8:1:2::"  # one host's /64: it may take any address in it


@pytest.fixture(autouse=True)
def forget_failures(admin, operator, viewer) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """The counts live in Redis, beyond the test database: start and end clean."""

    def forget() -> None:
        names = [admin.username, operator.username, viewer.username, "nobody",
                 *(f"guess-{i}" for i in range(30))]
        keys = [b.key for name in names
                for address in (ATTACKER, OFFICE, None, "2001:db8:1:2::/64", "2001:db8:1:3::/64")
                for b in budgets(name, address)]
        cache.delete_many([*keys, *(f"{k}:since" for k in keys)])

    forget()
    yield
    forget()


def fail_times(client: Client, username: str, times: int) -> None:
    for _ in range(times):
        reply = log_in(client, username, "wrong")
        assert reply.status_code == 200 and b"Wrong username or password" in reply.content


def test_sixth_try_is_refused_even_with_the_right_password(viewer) -> None:  # type: ignore[no-untyped-def]
    client = Client(REMOTE_ADDR=ATTACKER)
    fail_times(client, viewer.username, 5)
    reply = log_in(client, viewer.username, PASSWORD)
    assert reply.status_code == 429
    text = reply.content.decode()
    assert "Too many failed logins, try again in " in text
    wait = int(reply["Retry-After"])
    assert 0 < wait <= 300 and f"try again in {wait} s" in text
    assert "_auth_user_id" not in client.session


def test_the_lock_ends_after_the_window(viewer) -> None:  # type: ignore[no-untyped-def]
    import time_machine

    client = Client(REMOTE_ADDR=ATTACKER)
    fail_times(client, viewer.username, 5)
    assert log_in(client, viewer.username, PASSWORD).status_code == 429
    with time_machine.travel(time.time() + settings.LOGIN_FAILURE_WINDOW_S + 1, tick=False):
        assert logged_in(log_in(client, viewer.username, PASSWORD))


def test_success_clears_the_count(viewer) -> None:  # type: ignore[no-untyped-def]
    client = Client(REMOTE_ADDR=ATTACKER)
    fail_times(client, viewer.username, 4)
    assert logged_in(log_in(client, viewer.username, PASSWORD))
    other = Client(REMOTE_ADDR=OFFICE)
    fail_times(other, viewer.username, 4)  # four more: a fresh count, not eight
    assert logged_in(log_in(other, viewer.username, PASSWORD))


def test_another_user_is_unaffected(viewer, operator) -> None:  # type: ignore[no-untyped-def]
    client = Client(REMOTE_ADDR=ATTACKER)
    fail_times(client, viewer.username, 5)
    assert log_in(client, viewer.username, PASSWORD).status_code == 429
    assert logged_in(log_in(Client(REMOTE_ADDR=ATTACKER), operator.username, PASSWORD))


def test_one_address_guessing_many_usernames_is_refused(operator) -> None:  # type: ignore[no-untyped-def]
    client = Client(REMOTE_ADDR=ATTACKER)
    for i in range(settings.LOGIN_FAILURES_PER_ADDRESS):
        log_in(client, f"guess-{i}", "wrong")
    reply = log_in(client, operator.username, PASSWORD)
    assert reply.status_code == 429 and b"Too many failed logins" in reply.content
    # The same person from the office is fine: the limit is on the address.
    assert logged_in(log_in(Client(REMOTE_ADDR=OFFICE), operator.username, PASSWORD))


def test_admin_login_form_is_limited_too(admin) -> None:  # type: ignore[no-untyped-def]
    client = Client(REMOTE_ADDR=ATTACKER)
    for _ in range(5):
        log_in(client, admin.username, "wrong", "/admin/login/")
    reply = log_in(client, admin.username, PASSWORD, "/admin/login/?next=/admin/")
    assert reply.status_code == 200  # the admin's form, with its error, not a login
    assert "_auth_user_id" not in client.session
    assert log_in(client, admin.username, PASSWORD).status_code == 429


def test_login_says_so_when_redis_is_down(settings, viewer) -> None:  # type: ignore[no-untyped-def]
    from collectors.localray import free_port

    settings.CACHES = {"default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
        "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1}}}
    reply = log_in(Client(REMOTE_ADDR=ATTACKER), viewer.username, PASSWORD)
    assert reply.status_code == 503
    assert b"cannot reach Redis" in reply.content


def test_an_ipv6_host_rotating_through_its_64_meets_one_budget(viewer) -> None:  # type: ignore[no-untyped-def]
    """Issue 43, L8: each guess from a new address of the same /64 counts against one
    budget (a host is given a whole /64); a neighbour /64 is another place."""
    for i in range(5):
        fail_times(Client(REMOTE_ADDR=f"{V6_HOST}{i + 1:x}"), viewer.username, 1)
    reply = log_in(Client(REMOTE_ADDR=f"{V6_HOST}beef"), viewer.username, PASSWORD)
    assert reply.status_code == 429
    assert logged_in(log_in(Client(REMOTE_ADDR="2001:db8:1:3::1"), viewer.username, PASSWORD))



def test_a_weak_password_is_refused_where_a_local_account_gets_one(admin) -> None:  # type: ignore[no-untyped-def]
    """Issue 43, L8: Django's validators, as the admin pages and `changepassword` call
    them: short, common, all digits or like the username is refused."""
    from django.contrib.auth.password_validation import validate_password
    from django.core.exceptions import ValidationError

    for weak in ("short", "password1234", "123456789012", f"{admin.username}2026!"):
        with pytest.raises(ValidationError):
            validate_password(weak, admin)
    validate_password("a quiet violet ledger", admin)
