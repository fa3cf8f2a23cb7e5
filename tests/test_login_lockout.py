"""Nobody can lock the admin out by guessing at the admin's password. Failures count per
username from one address (and per address): a stranger's guesses from one place do
not stop the admin logging in from another. Guesses spread over many addresses meet a
limit per username too, but a browser that logged in as that user before still gets
in, and that proof cannot be forged."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.cache import cache
from django.test import Client

from dashboard.core.login import KNOWN_BROWSER_COOKIE, budgets
from tests.conftest import PASSWORD, log_in, logged_in

ATTACKER = "198.51.100.7"
OFFICE = "203.0.113.20"
BOTNET = [f"192.0.2.{i}" for i in range(1, 13)]
CAFE = "203.0.113.99"


@pytest.fixture(autouse=True)
def forget_failures(admin, viewer) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """The counts live in Redis, beyond the test database: start and end clean."""

    def forget() -> None:
        keys = {b.key for name in (admin.username, viewer.username, "nobody")
                for address in (ATTACKER, OFFICE, CAFE, *BOTNET, None)
                for b in budgets(name, address)}
        cache.delete_many([*keys, *(f"{k}:since" for k in keys)])

    forget()
    yield
    forget()


def test_a_stranger_guessing_the_admins_password_does_not_lock_the_admin_out(admin) -> None:  # type: ignore[no-untyped-def]
    stranger = Client(REMOTE_ADDR=ATTACKER)
    for _ in range(8):
        log_in(stranger, admin.username, "wrong")
    assert log_in(stranger, admin.username, PASSWORD).status_code == 429  # the stranger is
    assert logged_in(log_in(Client(REMOTE_ADDR=OFFICE), admin.username, PASSWORD))
    # The admin's own login form too (it wants a staff account).
    admin.is_staff = True
    admin.save()
    for _ in range(8):
        log_in(stranger, admin.username, "wrong", "/admin/login/")
    office = Client(REMOTE_ADDR=OFFICE)
    reply = log_in(office, admin.username, PASSWORD, "/admin/login/?next=/admin/")
    assert reply.status_code == 302 and "_auth_user_id" in office.session


def test_guesses_from_many_addresses_stop_new_browsers_not_the_admins_own(admin, settings) -> None:  # type: ignore[no-untyped-def]
    settings.LOGIN_FAILURES_PER_USER_ANYWHERE = 10
    own = Client(REMOTE_ADDR=OFFICE)
    assert logged_in(log_in(own, admin.username, PASSWORD))
    own.post("/logout/")
    for address in BOTNET:  # one guess each: under every per-address limit
        log_in(Client(REMOTE_ADDR=address), admin.username, "wrong")
    # A browser that never logged in as the admin, with the right password: refused.
    stranger = Client(REMOTE_ADDR=CAFE)
    reply = log_in(stranger, admin.username, PASSWORD)
    assert reply.status_code == 429 and "_auth_user_id" not in stranger.session
    # The admin's own browser, from anywhere: in.
    own.defaults["REMOTE_ADDR"] = CAFE
    assert logged_in(log_in(own, admin.username, PASSWORD))


def test_the_known_browser_cookie_cannot_be_forged_or_lent(admin, viewer, settings) -> None:  # type: ignore[no-untyped-def]
    settings.LOGIN_FAILURES_PER_USER_ANYWHERE = 10
    viewers = Client(REMOTE_ADDR=OFFICE)
    assert logged_in(log_in(viewers, viewer.username, PASSWORD))
    for address in BOTNET:
        log_in(Client(REMOTE_ADDR=address), admin.username, "wrong")
    # The viewer's browser is known for the viewer, not for the admin.
    lent = Client(REMOTE_ADDR=CAFE)
    lent.cookies[KNOWN_BROWSER_COOKIE] = viewers.cookies[KNOWN_BROWSER_COOKIE].value
    assert log_in(lent, admin.username, PASSWORD).status_code == 429
    forged = Client(REMOTE_ADDR=CAFE)
    forged.cookies[KNOWN_BROWSER_COOKIE] = admin.username
    assert log_in(forged, admin.username, PASSWORD).status_code == 429
