"""An address that answers with something other than HTTP (another service's port: Ray's
GCS, SSH; a proxy that cuts the answer short) is a failure the operator reads, like a
refused connection, never an exception out of the one HTTP seam. `serve` once died at
its start of one (http.client.BadStatusLine from the Ray dashboard address)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from collectors.http import SourceError, get_json
from dashboard.cluster.tasks import poll_ray_state
from dashboard.core.models import SourceHealth
from tests.receivers import JsonHandler, serve

NOT_HTTP = {
    "http2 frames": (b"\x00\x00\x12\x04\x00\x00\x00\x00\x00" * 3, "did not answer in HTTP"),
    "ssh": (b"SSH-2.0-OpenSSH_9.2\r\n", "did not answer in HTTP"),
    "headers without end": (b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 200 + b"\r\n",
                            "did not answer in HTTP"),
    "body cut short": (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n[1,",
                       "cut its answer short"),
    "chunks cut short": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                         "cut its answer short"),
}


@pytest.fixture
def answers(request) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """The URL of a stand-in that answers every request with the raw bytes
    `request.param`, then closes the connection."""
    payload = request.param

    class Raw(JsonHandler):
        def do_GET(self) -> None:
            self.wfile.write(payload)
            self.close_connection = True

    server = serve(Raw)
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("answers", "said"), list(NOT_HTTP.values()), ids=list(NOT_HTTP),
                         indirect=["answers"])
def test_an_answer_that_is_not_http_is_a_source_error(answers: str, said: str) -> None:
    with pytest.raises(SourceError) as failed:
        get_json(f"{answers}/api/version", timeout=5)
    assert said in failed.value.message
    assert f"{answers}/api/version" in failed.value.message


@pytest.mark.django_db
@pytest.mark.parametrize("answers", [NOT_HTTP["ssh"][0]], ids=["ssh"], indirect=True)
def test_a_ray_address_on_another_service_shows_in_the_status_strip(  # type: ignore[no-untyped-def]
        settings, answers: str) -> None:
    settings.RAY_ADDRESS = None
    settings.RAY_API_SERVER_ADDRESS = answers
    poll_ray_state()  # no exception: the poll records why it failed
    health = SourceHealth.objects.get(source="ray", scope="")
    assert health.state != SourceHealth.HEALTHY
    assert "did not answer in HTTP" in health.last_error
