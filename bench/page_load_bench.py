"""First render of the Cluster page, before and after `collectstatic`, in one run.

Before: the static files as a checkout serves them (plain names from the sources,
uncompressed, cached for 60 s). After: what `make run` serves since issue 14 (hashed
names, gzip copies, cached for good), WhiteNoise either way. The same raywatch
(`manage.py serve` on the embedded default, no Ray, no GPU source) is started twice on
one database: first without collected files, then after `collectstatic`.

For each, Chromium loads /cluster/ logged in, each time in a fresh context (an empty
cache): the time from navigation start to the load event, and what Plotly cost on the
wire (encoded body bytes; transferSize adds headers) and how long fetching it took
(request start to its last byte: the part compression changes; the rest of a load is
mostly parsing Plotly's JavaScript, which needs the CPU). Then once more in the same
context (a warm cache): the bytes Plotly cost again. Loopback only measures the server
and the browser; the same loads over an emulated 20 Mbit/s link with 40 ms round trips
(Chromium's network emulation) show what a remote viewer waits.

    python bench/page_load_bench.py
    python bench/page_load_bench.py --smoke   # one load per case, loopback only
    # overrides: BENCH_LOADS
Needs Chromium (/usr/bin/chromium) and Playwright; no Postgres, Redis or Ray.
"""

from __future__ import annotations

import atexit
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import harness

from collectors.localray import free_port
from tests.served import manage

LOADS = int(os.environ.get("BENCH_LOADS", harness.sized("5", "1")))
CHROMIUM = "/usr/bin/chromium"
# 20 Mbit/s down, 10 up, 40 ms round trip: a viewer over a VPN or from another site.
LINK = {"offline": False, "latency": 40, "downloadThroughput": 20e6 / 8,
        "uploadThroughput": 10e6 / 8}
LINKS = harness.sized((("loopback", None), ("20 Mbit/s 40 ms", LINK)), (("loopback", None),))
NAVIGATION = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const plotly = performance.getEntriesByType('resource')
    .find(e => e.name.includes('/vendor/plotly'));
  return {load_ms: nav.loadEventEnd - nav.startTime, plotly_url: plotly.name,
          plotly_ms: plotly.responseEnd - plotly.startTime,
          plotly_encoded: plotly.encodedBodySize, plotly_transfer: plotly.transferSize,
          plotly_decoded: plotly.decodedBodySize};
}"""


def load(browser: Any, base: str, state: dict[str, Any], link: dict[str, Any] | None
         ) -> dict[str, Any]:
    """One cold load of /cluster/, then a warm one in the same context."""
    context = browser.new_context(viewport={"width": 1440, "height": 900}, storage_state=state)
    try:
        page = context.new_page()
        if link:
            session = context.new_cdp_session(page)
            session.send("Network.enable")
            session.send("Network.emulateNetworkConditions", link)
        page.goto(f"{base}/cluster/", wait_until="load")
        cold = page.evaluate(NAVIGATION)
        page.goto(f"{base}/cluster/", wait_until="load")
        warm = page.evaluate(NAVIGATION)
        return {**cold, "warm_plotly_transfer": warm["plotly_transfer"],
                "warm_load_ms": warm["load_ms"]}
    finally:
        context.close()


def measure(browser: Any, base: str, password: str) -> dict[str, Any]:
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base}/login/?next=/cluster/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/cluster/")
    state = context.storage_state()
    context.close()
    figures: dict[str, Any] = {}
    for name, link in LINKS:
        runs = [load(browser, base, state, link) for _ in range(LOADS)]
        figures[name] = {
            "load_ms_median": statistics.median(r["load_ms"] for r in runs),
            "load_ms_max": max(r["load_ms"] for r in runs),
            "warm_load_ms_median": statistics.median(r["warm_load_ms"] for r in runs),
            "plotly_fetch_ms_median": statistics.median(r["plotly_ms"] for r in runs),
            "plotly_bytes_sent": runs[-1]["plotly_encoded"],
            "plotly_bytes_decoded": runs[-1]["plotly_decoded"],
            "plotly_transfer_warm": runs[-1]["warm_plotly_transfer"],
            "plotly_url": runs[-1]["plotly_url"].split("/static/", 1)[1],
        }
    return figures


def main() -> int:
    from playwright.sync_api import sync_playwright

    data = Path(tempfile.mkdtemp(prefix="raywatch-page-load-"))
    atexit.register(shutil.rmtree, data, True)  # its database and collected static files
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(RAYWATCH_DATA_DIR=str(data), RAY_ADDRESS=f"http://127.0.0.1:{free_port()}",
               RAYWATCH_GPU_SOURCE="off", RAYWATCH_SECRET_KEY=harness.BENCH_SECRET_KEY)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "ensure_admin")
    password = (data / "admin-password.txt").read_text().split()[1]
    results: dict[str, Any] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM,
                                     args=["--no-sandbox", "--disable-gpu"])
        for case, collect in (("before", False), ("after", True)):
            if collect:
                manage(env, "collectstatic", "--noinput", "-v", "0")
            with harness.served(env, data / f"serve-{case}.log") as base:
                results[case] = measure(browser, base, password)
        browser.close()
    rows = [[case, link, f["load_ms_median"], f["load_ms_max"], f["plotly_fetch_ms_median"],
             f["warm_load_ms_median"], f["plotly_bytes_sent"], f["plotly_transfer_warm"],
             f["plotly_url"]]
            for case, by_link in results.items() for link, f in by_link.items()]
    harness.print_table(
        f"Cluster page, navigation start to load event (ms), {LOADS} cold loads each",
        ["static files", "link", "median", "max", "Plotly fetch median", "warm median",
         "Plotly bytes sent (cold)", "Plotly bytes (warm)", "Plotly file"], rows)
    harness.print_json({"bench": "page_load", "loads": LOADS, **results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
