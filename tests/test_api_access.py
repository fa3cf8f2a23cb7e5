"""Every page and API endpoint needs at least the viewer role; the API takes tokens."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.conftest import PASSWORD, api_token

ENDPOINTS = ["/api/nodes/", "/api/cluster/", "/api/sources/", "/api/schema/",
             "/api/agents/coverage/"]


@pytest.mark.parametrize("path", ENDPOINTS)
def test_anonymous_api_is_refused(db: None, path: str) -> None:
    assert Client().get(path).status_code in (401, 403)


@pytest.mark.parametrize("path", ENDPOINTS)
def test_user_without_role_is_refused(roleless, path: str) -> None:  # type: ignore[no-untyped-def]
    reply = Client().get(path, HTTP_AUTHORIZATION=f"Token {api_token(roleless)}")
    assert reply.status_code == 403


@pytest.mark.parametrize("path", ENDPOINTS)
def test_viewer_token_reads_the_api(viewer, path: str) -> None:  # type: ignore[no-untyped-def]
    reply = Client().get(path, HTTP_AUTHORIZATION=f"Token {api_token(viewer)}")
    assert reply.status_code == 200


def test_wrong_token_is_refused(viewer) -> None:  # type: ignore[no-untyped-def]
    reply = Client().get("/api/nodes/", HTTP_AUTHORIZATION="Token not-a-real-token")
    assert reply.status_code == 401


def test_schema_documents_the_endpoints(viewer) -> None:  # type: ignore[no-untyped-def]
    client = Client()
    client.login(username=viewer.username, password=PASSWORD)
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").content.decode()
    for path in ("/api/nodes/", "/api/cluster/", "/api/sources/", "/api/agents/coverage/"):
        assert path in schema


def test_pages_need_login(db: None) -> None:
    reply = Client().get("/cluster/")
    assert reply.status_code == 302 and reply["Location"].startswith("/login/")


def test_page_refuses_user_without_role(roleless) -> None:  # type: ignore[no-untyped-def]
    client = Client()
    client.login(username=roleless.username, password=PASSWORD)
    assert client.get("/cluster/").status_code == 403


def test_drf_create_token_command_makes_a_working_token(viewer) -> None:  # type: ignore[no-untyped-def]
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("drf_create_token", viewer.username, stdout=out)
    key = out.getvalue().split()[2]
    assert Client().get("/api/nodes/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 200


def test_plotly_is_served_from_our_static_files(viewer) -> None:  # type: ignore[no-untyped-def]
    from django.contrib.staticfiles import finders

    path = finders.find("vendor/plotly-basic.min.js")
    assert path
    with open(path, "rb") as script:
        assert script.read(200).startswith(b"/**")
