"""The API's lists come a page at a time: page_size is honoured up to its maximum, the
rest is reachable through the Link header, and a malformed page_size is a clear 400."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User

from dashboard.core.pagination import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE
from dashboard.trials.models import Experiment, Trial
from tests.conftest import token_client

pytestmark = pytest.mark.both_backends

TRIALS = MAX_PAGE_SIZE + 150


def make_trials(n: int = TRIALS) -> None:
    experiment = Experiment.objects.create(name="months-ago")
    Trial.objects.bulk_create(
        Trial(experiment=experiment, trial_id=f"ab12c_{i:05d}", status="TERMINATED")
        for i in range(n)
    )


def next_link(reply) -> str | None:  # type: ignore[no-untyped-def]
    match = re.search(r'<([^>]+)>; rel="next"', reply.headers.get("Link", ""))
    return match[1] if match else None


def test_trials_come_a_page_at_a_time_with_the_total(viewer: User) -> None:
    make_trials()
    api = token_client(viewer)
    first = api.get("/api/trials/")
    assert first.status_code == 200 and len(first.json()) == DEFAULT_PAGE_SIZE
    assert first.headers["X-Total-Count"] == str(TRIALS)
    small = api.get("/api/trials/?page_size=40&page=2")
    assert [t["trial_id"] for t in small.json()] == [f"ab12c_{i:05d}" for i in range(40, 80)]


def test_following_next_links_lists_every_trial_once(viewer: User) -> None:
    make_trials()
    api = token_client(viewer)
    seen: list[str] = []
    url: str | None = "/api/trials/?status=TERMINATED&page_size=300"
    while url:
        reply = api.get(url)
        seen += [t["trial_id"] for t in reply.json()]
        url = next_link(reply)
    assert len(seen) == TRIALS == len(set(seen))


def test_page_size_over_the_maximum_is_clamped(viewer: User) -> None:
    make_trials()
    reply = token_client(viewer).get(f"/api/trials/?page_size={MAX_PAGE_SIZE * 10}")
    assert len(reply.json()) == MAX_PAGE_SIZE and reply.headers["X-Page-Size"] == str(MAX_PAGE_SIZE)


def test_malformed_page_size_is_a_400_that_says_why(viewer: User) -> None:
    api = token_client(viewer)
    for bad in ("0", "-5", "ten", "1.5"):
        for path in ("/api/trials/", "/api/alerts/", "/api/nodes/", "/api/audit/"):
            reply = api.get(f"{path}?page_size={bad}")
            assert reply.status_code == 400 and "page_size" in reply.json(), (path, bad)
