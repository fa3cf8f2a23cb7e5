"""A redirect never carries raywatch's credentials to another host: a Ray dashboard
address (or a proxy in front of it) that answers 302 to somewhere else gets no Ray
token sent there. raywatch stops at the redirect and says where it pointed, so the
operator can give that address instead."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from collectors.http import SourceError, get_json
from dashboard.cluster.tasks import poll_ray_state
from dashboard.core.models import SourceHealth
from tests.receivers import JsonHandler, serve

RAY_TOKEN = "ray-token-never-elsewhere-5d1f"


class Server:
    """A local HTTP server that records each request's headers and answers every GET
    with `status`, a `Location` when it is given one, and an empty JSON list."""

    def __init__(self, status: int = 200, location: str = "") -> None:
        self.headers_seen: list[dict[str, str]] = []
        recorder = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                recorder.headers_seen.append(dict(self.headers))
                self.send_response(status)
                if location:
                    self.send_header("Location", location + self.path)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"[]")

        self.httpd = serve(Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def elsewhere() -> Iterator[Server]:
    server = Server()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


@pytest.fixture
def redirecting(elsewhere: Server) -> Iterator[Server]:
    server = Server(302, location=elsewhere.url)
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def sent_anything_secret(server: Server) -> bool:
    return any(name.lower() in ("authorization", "cookie", "proxy-authorization")
               for headers in server.headers_seen for name in headers)


@pytest.mark.django_db
def test_ray_token_does_not_follow_a_redirect(settings, redirecting: Server,  # type: ignore[no-untyped-def]
                                              elsewhere: Server) -> None:
    settings.RAY_ADDRESS = None
    settings.RAY_API_SERVER_ADDRESS = redirecting.url
    settings.RAY_AUTH_TOKEN = RAY_TOKEN
    poll_ray_state()
    assert redirecting.headers_seen[0]["Authorization"] == f"Bearer {RAY_TOKEN}"
    assert not any(RAY_TOKEN in str(h) for h in elsewhere.headers_seen)
    assert not sent_anything_secret(elsewhere)
    # The operator reads why the poll failed, and where the dashboard address points.
    health = SourceHealth.objects.get(source="ray", scope="")
    assert health.state != SourceHealth.HEALTHY
    assert f"redirects to {elsewhere.url}/" in health.last_error
    assert RAY_TOKEN not in health.last_error


@pytest.mark.parametrize("header", ["Authorization", "Cookie", "Proxy-Authorization"])
def test_no_credential_header_follows_a_redirect(redirecting: Server, elsewhere: Server,
                                                 header: str) -> None:
    with pytest.raises(SourceError) as refused:
        get_json(f"{redirecting.url}/api/x", headers={header: "secret-value"})
    assert f"{elsewhere.url}/api/x" in refused.value.message
    assert refused.value.status == 302
    assert elsewhere.headers_seen == []


def test_a_request_without_credentials_still_follows(redirecting: Server,
                                                     elsewhere: Server) -> None:
    assert get_json(f"{redirecting.url}/api/x") == []
    assert len(elsewhere.headers_seen) == 1
