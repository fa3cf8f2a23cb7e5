"""Credentials never reach a page, the API or the logs: not the Ray token, whatever
the address that was given answers (even a proxy that echoes the request back),
not a password written into the Ray address, not Django's secret key."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from django.conf import settings as django_settings
from django.test import Client

from dashboard.cluster.tasks import poll_ray_state
from tests.conftest import PASSWORD, api_token
from tests.receivers import JsonHandler, serve

RAY_TOKEN = "ray-token-Q7xv9KpL2mZ8"
PASSWORD_IN_URL = "hunter2-in-the-url"


class Echo:
    """A Ray dashboard stand-in that answers every GET with `status` and a body that
    repeats the request's headers, as some proxies' error pages do."""

    def __init__(self) -> None:
        self.status, self.as_json, self.headers_seen = 500, False, []
        echo = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                echo.headers_seen.append(dict(self.headers))
                said = "\n".join(f"{k}: {v}" for k, v in self.headers.items())
                body = json.dumps({"result": False, "msg": said}) if echo.as_json else said
                self.send_response(echo.status)
                self.send_header("Content-Type", "application/json" if echo.as_json
                                 else "text/plain")
                self.end_headers()
                self.wfile.write(body.encode())

        self.server = serve(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def echo(settings) -> Iterator[Echo]:  # type: ignore[no-untyped-def]
    server = Echo()
    settings.RAY_ADDRESS = None
    settings.RAY_API_SERVER_ADDRESS = server.url
    settings.RAY_AUTH_TOKEN = RAY_TOKEN
    yield server
    server.server.shutdown()
    server.server.server_close()


def everything_shown(admin, caplog) -> str:  # type: ignore[no-untyped-def]
    """The status strip, the sources API and the logs, as one text."""
    client = Client()
    assert client.login(username=admin.username, password=PASSWORD)
    token = api_token(admin)
    pages = [client.get(path).content.decode()
             for path in ("/cluster/", "/alerts/", "/alerts/channels/", "/gpus/")]
    api = Client(HTTP_AUTHORIZATION=f"Token {token}").get("/api/sources/").content.decode()
    return "\n".join([*pages, api, caplog.text])


@pytest.mark.parametrize(("status", "as_json"),
                         [(401, False), (403, False), (500, False), (200, False), (200, True)])
def test_ray_token_is_not_shown_whatever_ray_answers(admin, echo: Echo, caplog, status: int,  # type: ignore[no-untyped-def]
                                                      as_json: bool) -> None:
    echo.status, echo.as_json = status, as_json
    with caplog.at_level(logging.DEBUG):
        poll_ray_state()
    assert echo.headers_seen[0]["Authorization"] == f"Bearer {RAY_TOKEN}"  # it was sent
    shown = everything_shown(admin, caplog)
    assert "Ray dashboard" in shown or "127.0.0.1" in shown  # the failure is explained
    assert RAY_TOKEN not in shown


def test_password_in_the_ray_address_is_not_shown(admin, settings, caplog) -> None:  # type: ignore[no-untyped-def]
    settings.RAY_ADDRESS = None
    settings.RAY_API_SERVER_ADDRESS = f"http://raywatch:{PASSWORD_IN_URL}@127.0.0.1:9"
    with caplog.at_level(logging.DEBUG):
        poll_ray_state()
    shown = everything_shown(admin, caplog)
    assert "cannot reach http://127.0.0.1:9/" in shown
    assert PASSWORD_IN_URL not in shown


def test_secret_key_is_not_on_any_page(admin, caplog) -> None:  # type: ignore[no-untyped-def]
    assert django_settings.SECRET_KEY not in everything_shown(admin, caplog)
