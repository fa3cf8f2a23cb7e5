"""Static files as `make run` serves them (migrate, collectstatic, serve): Chromium gets
Plotly.js (static/vendor/plotly-basic.min.js, 1.2 MB) under a name with its hash,
gzip-compressed, with a far-future cache header, and the Cluster page draws its chart
with it, in the one dark look every chart shares. A client that does not ask for
compression gets the plain bytes."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest

from collectors.localray import free_port
from tests.conftest import browser_context, wait_for
from tests.served import embedded_env, manage_all, migrate, start_serve, stop_serve

pytestmark = pytest.mark.browser
PLOTLY_JS = Path(__file__).resolve().parent.parent / "static" / "vendor" / "plotly-basic.min.js"
HASHED = re.compile(r"/static/vendor/plotly-basic\.min\.[0-9a-f]{12}\.js$")


def fetch(url: str, encoding: str) -> tuple[dict[str, str], bytes]:
    request = urllib.request.Request(url, headers={"Accept-Encoding": encoding})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return {k.lower(): v for k, v in reply.headers.items()}, reply.read()


def answers(url: str) -> bool:
    try:
        return b'"ok"' in fetch(url, "identity")[1]
    except OSError:
        return False


def test_plotly_is_served_compressed_and_cached_for_good(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = embedded_env(tmp_path, RAY_ADDRESS=f"http://127.0.0.1:{free_port()}",
                       RAYWATCH_GPU_SOURCE="off")
    migrate(env)  # what `make run` does
    manage_all(env, ("ensure_admin",), ("collectstatic", "--noinput", "-v", "0"))
    password = (tmp_path / "admin-password.txt").read_text().split()[1]
    port, log = free_port(), tmp_path / "serve.log"
    base = f"http://127.0.0.1:{port}"
    server = start_serve(env, port, log)
    context = browser_context(browser, viewport={"width": 1280, "height": 800})
    try:
        wait_for(lambda: answers(f"{base}/healthz"), 60, 0.5, "the server")
        page = context.new_page()
        page.goto(f"{base}/login/?next=/cluster/")
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", password)
        with page.expect_response(lambda r: "/vendor/plotly" in r.url) as plotly:
            page.click("button[type=submit]")
        reply = plotly.value
        assert HASHED.search(reply.url), reply.url
        assert reply.headers.get("content-encoding") == "gzip"
        assert "immutable" in reply.headers["cache-control"]
        assert int(re.search(r"max-age=(\d+)", reply.headers["cache-control"])[1]) >= 86400 * 365
        assert reply.body() == PLOTLY_JS.read_bytes()  # what the browser decoded
        sent = page.evaluate("""() => performance.getEntriesByType('resource')
            .filter(e => e.name.includes('/vendor/plotly')).map(e => e.encodedBodySize)[0]""")
        assert sent < PLOTLY_JS.stat().st_size / 2
        page.wait_for_function("() => document.querySelector('#usage-chart .main-svg')")
        assert page.evaluate("""() => {
            const l = document.getElementById('usage-chart')._fullLayout;
            const css = getComputedStyle(document.documentElement);
            return [l.paper_bgcolor === css.getPropertyValue('--panel').trim(),
                    l.plot_bgcolor === l.paper_bgcolor, l.yaxis.gridcolor, l.yaxis.title.text];
        }""") == [True, True, "#26313d", "in use (%)"]  # no white gridline on the dark panel
        # An iteration axis ticks whole numbers only, even over three iterations.
        ticks = page.evaluate("""async () => {
            const div = document.createElement('div');
            document.body.append(div);
            await window.raywatch.charts.draw(div, [{x: [1, 2, 3], y: [0.5, 0.2, 0.1]}],
                {x: {title: 'iteration', integer: true}, y: {title: 'loss'}});
            return [...div.querySelectorAll('.xtick text')].map(t => t.textContent);
        }""")
        assert ticks == ["1", "2", "3"]

        headers, body = fetch(reply.url, "identity")
        assert "content-encoding" not in headers and body == PLOTLY_JS.read_bytes()
    finally:
        context.close()
        stop_serve(server, log)
