"""Two real Ray clusters watched by one raywatch (issue 15).

The suite's cluster is `alpha` (RAY_ADDRESS's, named by RAYWATCH_CLUSTER_NAME); a second
real local cluster, `beta`, is added by an admin (`manage.py cluster add`). A Tune search
runs on each: alpha's trials are read from raywatch's own host (RAYWATCH_LOG_DIRS), beta's
by beta's node agent, whose token belongs to beta. Both clusters' nodes sit at the same
address, as two clusters on two private networks may.

Asserted through the API: each cluster's nodes, trials and incidents are scoped to it;
beta's hung trial opens a stall on beta, routed to the channel that takes beta only and
named "on cluster beta" there; once beta's Ray is stopped it is marked ended (how and
since when), its history stays browsable, and alpha goes on being polled. Once on the
embedded default and once on the production topology (Celery worker and beat, Postgres,
Redis), where each cluster's poll is a Celery task of its own.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from collectors.localray import LocalCluster, LocalRay, free_port
from tests.agents import agent_env, running_agent
from tests.conftest import start_search, wait_for
from tests.patience import ms
from tests.served import (
    QUICK,
    Raywatch,
    api_post,
    embedded_env,
    first_run,
    manage,
    manage_all,
    nodes_or_none,
    scratch_database,
    start_serve,
    stop_serve,
)
from tests.test_end_to_end import login, screenshots

pytestmark = [pytest.mark.beside, pytest.mark.ray, pytest.mark.browser, pytest.mark.timeout(600)]
# Where to save screenshots (1280 and 1440 px) when a person wants to look at them.
SHOTS = os.environ.get("RAYWATCH_CLUSTERS_SHOTS")
ALPHA = {
    **QUICK, "RAYWATCH_CLUSTER_ENDED_S": "6", "RAYWATCH_CLUSTER_NAME": "alpha",
    "RAYWATCH_GPU_SOURCE": "off",
    "RAYWATCH_WEBHOOK_ALLOW_PRIVATE": "1",  # the test's receivers are on loopback
}
CHANNELS = """
from dashboard.alerts.models import Channel
Channel.objects.create(name="beta-ops", kind="webhook", url="{beta}", kinds=["trial_stalled"],
                       clusters=["beta"])
Channel.objects.create(name="alpha-ops", kind="webhook", url="{alpha}",
                       kinds=["trial_stalled"], clusters=["alpha"])
"""


@pytest.fixture
def beta(tmp_path: Path) -> Iterator[tuple[LocalRay, LocalCluster]]:
    """A second real Ray cluster on this host, with a Ray temp dir of its own."""
    temp_dir = Path(tempfile.mkdtemp(prefix="rwc-", dir="/tmp"))  # short: socket paths
    local = LocalRay(tmp_path / "beta-ray.json", num_cpus=2, temp_dir=temp_dir,
                     log_monitor=False)
    cluster = local.start(log_path=tmp_path / "beta-ray.log")
    try:
        yield local, cluster
    finally:
        local.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(params=["embedded", "production"])
def backend(request, tmp_path: Path) -> Iterator[dict[str, str]]:  # type: ignore[no-untyped-def]
    env = embedded_env(tmp_path / "data")
    if request.param == "embedded":
        yield env
        return
    with scratch_database(os.environ["DATABASE_URL"]) as database_url:
        yield {**env, "DATABASE_URL": database_url, "REDIS_URL": os.environ["REDIS_URL"],
               "RAYWATCH_CHANNEL_PREFIX": f"mc-{uuid.uuid4().hex[:6]}"}


@contextmanager
def running_searches(*searches: tuple[LocalCluster, Path, str, str]
                     ) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Tune searches (tests/tune_scripts/search.py), killed afterwards if still running."""
    started = [start_search(*search) for search in searches]
    try:
        yield started
    finally:
        for search in started:
            stop_search(search, signal.SIGKILL)


def stop_search(search: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    """Signal a search's process group, if it still runs (a short one ends by itself)."""
    if search.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(search.pid, sig)


@contextmanager
def serving(env: dict[str, str], token: str, password: str, tmp_path: Path
            ) -> Iterator[Raywatch]:
    """`manage.py serve` until the test is done, once it answers with the nodes it
    polled; its log must hold no traceback."""
    port, log = free_port(), tmp_path / "serve.log"
    server = start_serve(env, port, log)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: nodes_or_none(f"{url}/api/nodes/", token) is not None, 90, 0.5,
                 "raywatch to answer with the nodes it polled",
                 explain=lambda: log.read_text()[-2000:])
        yield Raywatch(url, token, password, env)
    finally:
        output = stop_serve(server, log)
    assert "Traceback" not in output, output[-8000:]


def state_of(rw: Raywatch, name: str) -> dict[str, Any]:
    return next(c for c in rw.api("/api/clusters/") if c["name"] == name)


def test_two_clusters_are_watched_apart_and_an_ended_one_stays_browsable(  # type: ignore[no-untyped-def]
        backend: dict[str, str], ray_cluster: LocalCluster, beta, receivers, page,
        tmp_path: Path) -> None:
    beta_ray, beta_cluster = beta
    storage_a, storage_b = tmp_path / "results-a", tmp_path / "results-b"
    storage_a.mkdir()
    storage_b.mkdir()
    name_a, name_b = f"alpha-{uuid.uuid4().hex[:6]}", f"beta-{uuid.uuid4().hex[:6]}"
    token_file = Path.home() / ".ray" / "auth_token"  # both clusters take the suite's token
    env = {**backend, **ALPHA, "RAY_ADDRESS": ray_cluster.gcs_address,
           "RAYWATCH_LOG_DIRS": str(storage_a)}
    token, password = first_run(env)
    to_beta, to_alpha = receivers(200), receivers(200)
    beta_ip = beta_cluster.gcs_address.rpartition(":")[0]
    *_, node_token = manage_all(
        env, ("cluster", "add", "beta", beta_cluster.dashboard_url,
              "--gcs", beta_cluster.gcs_address, "--token-file", str(token_file)),
        ("shell", "-v", "0", "-c", CHANNELS.format(beta=to_beta.url, alpha=to_alpha.url)),
        ("agent_token", "beta-head", "--ip", beta_ip, "--cluster", "beta"))
    node_token = node_token.strip()
    with running_searches((ray_cluster, storage_a, name_a, "quick"),
                          (beta_cluster, storage_b, name_b, "objective")) as searches, \
            serving(env, token, password, tmp_path) as rw:
        agent = agent_env(rw.url, node_token, tmp_path, "beta-head", beta_ip, gpus=1,
                          RAYWATCH_LOG_DIRS=str(storage_b))
        with running_agent(agent, tmp_path / "agent.log"):
            # Both clusters answer, each with its own node (at the same address).
            wait_for(lambda: all(state_of(rw, n)["state"] == "active"
                                 and state_of(rw, n)["nodes_alive"] >= 1
                                 for n in ("alpha", "beta")), 90, 1,
                     "both clusters to be polled", explain=lambda: rw.api("/api/clusters/"))
            nodes = {n: [x["node_id"] for x in rw.api(f"/api/nodes/?cluster={n}")]
                     for n in ("alpha", "beta")}
            # (Ray lists the dead nodes of earlier tests of the suite's cluster too.)
            assert nodes["beta"] == [beta_cluster.node_id], nodes
            assert ray_cluster.node_id in nodes["alpha"], nodes
            assert beta_cluster.node_id not in nodes["alpha"], nodes
            # beta's agent's GPU is beta's, though alpha's node has the same address.
            gpus = wait_for(lambda: (g := {n: [x["cluster"] for x in
                                               rw.api(f"/api/gpus/?cluster={n}")]
                                           for n in ("alpha", "beta")}) and g["beta"] and g,
                            30, 1, "beta's agent's GPU")
            assert gpus == {"alpha": [], "beta": ["beta"]}, gpus
            assert state_of(rw, "beta")["origin"] == "admin"
            assert state_of(rw, "alpha")["is_default"] is True

            # Each search's trials under its own cluster only.
            def trials_of(cluster: str, experiment: str) -> list[dict[str, Any]]:
                return [t for t in rw.api(f"/api/trials/?cluster={cluster}&page_size=1000")
                        if t["experiment"] == experiment]

            wait_for(lambda: len(trials_of("beta", name_b)) == 3, 120, 1,
                     "beta's trials, through beta's agent",
                     explain=lambda: (tmp_path / "agent.log").read_text()[-1500:])
            wait_for(lambda: len(trials_of("alpha", name_a)) == 3, 120, 1, "alpha's trials")
            assert not trials_of("alpha", name_b) and not trials_of("beta", name_a)
            assert {t["cluster"] for t in trials_of("beta", name_b)} == {"beta"}
            hung = next(t for t in trials_of("beta", name_b) if t["config"]["lr"] == 3.0)

            # The hang on beta: a stall on beta, told to beta's channel, naming beta.
            def stall(cluster: str) -> list[dict[str, Any]]:
                return [i for i in rw.api(f"/api/alerts/?cluster={cluster}"
                                          "&kind=trial_stalled&state=firing")
                        if i["trial_id"] == hung["trial_id"]]

            [incident] = wait_for(lambda: stall("beta"), 120, 1, "the stall on beta")
            assert incident["cluster"] == "beta" and not stall("alpha")
            [message] = wait_for(to_beta.accepted, 60, 0.5, "beta's channel to be told")
            assert message["cluster"] == "beta", message
            assert message["title"] == f"[FIRING:1] experiment {name_b} on cluster beta", message
            assert message["group"]["key"] == f"beta/experiment:{name_b}", message
            assert [i["cluster"] for i in message["incidents"]] == ["beta"]
            assert not [m for m in to_alpha.accepted() if m["cluster"] == "beta"]
            results_before = len(rw.api(f"/api/trials/{hung['id']}/results/"))
            assert results_before >= 4
            in_the_browser(page, rw, name_a, name_b, beta_cluster, ray_cluster.node_id)

        # Beta's Ray goes away: unreachable, then ended; alpha goes on.
        for search in searches:
            stop_search(search)
        beta_ray.stop()
        gone = wait_for(lambda: (c := state_of(rw, "beta"))["state"] == "ended" and c, 90, 1,
                        "beta to be marked ended", explain=lambda: state_of(rw, "beta"))
        assert "no answer since" in gone["end_reason"], gone
        seen = state_of(rw, "alpha")["last_seen_at"]
        wait_for(lambda: state_of(rw, "alpha")["last_seen_at"] > seen, 30, 0.5,
                 "alpha to go on being polled")
        assert state_of(rw, "alpha")["state"] == "active"

        # Beta's history is still there: its trials, their results, its node (now DEAD),
        # and its stall resolved (an ended cluster runs nothing).
        assert len(trials_of("beta", name_b)) == 3
        assert len(rw.api(f"/api/trials/{hung['id']}/results/")) >= results_before
        [node] = rw.api("/api/nodes/?cluster=beta")
        assert (node["node_id"], node["state"]) == (beta_cluster.node_id, "DEAD"), node
        wait_for(lambda: not stall("beta"), 60, 1, "beta's stall to resolve")


def in_the_browser(page, rw: Raywatch, name_a: str, name_b: str,  # type: ignore[no-untyped-def]
                   beta_cluster: LocalCluster, alpha_node_id: str) -> None:
    """All clusters at a glance; the header's switcher scopes the pages to beta."""
    login(page, rw, "/cluster/")
    overview = page.locator("#clusters-table")
    expect(overview.locator('tr[data-cluster="alpha"] td.state')).to_have_text("active")
    expect(overview.locator('tr[data-cluster="beta"] td.state')).to_have_text("active")
    expect(overview.locator('tr[data-cluster="beta"] td.num.firing')).to_have_text(
        re.compile(r"[1-9]"), timeout=ms(20))  # its stall
    expect(page.locator('#nodes tbody tr[data-cluster="beta"]')).to_have_count(1)
    expect(page.locator('#nodes tbody tr[data-cluster="alpha"]').first).to_be_visible()
    shoot(page, "all-clusters")
    page.select_option("#cluster-switch", "beta")
    page.wait_for_load_state()
    expect(page.locator("#cluster-name")).to_have_text("beta")
    expect(page.locator("#nodes tbody tr")).to_have_count(1)
    expect(page.locator(f'#nodes tbody tr[data-node-id="{beta_cluster.node_id}"]')).to_be_visible()
    # Its history: its search's trials asked Ray for no GPU.
    expect(page.locator("#gpu-hours")).to_contain_text("No trial has held a GPU yet.")
    shoot(page, "beta")
    page.goto(f"{rw.url}/experiments/")  # the choice stays (a cookie)
    expect(page.locator(f'tr[data-experiment="{name_b}"]')).to_be_visible(timeout=ms(20))
    expect(page.locator(f'tr[data-experiment="{name_a}"]')).to_have_count(0)
    page.goto(f"{rw.url}/")  # triage, of beta: its stall
    expect(page.locator("main")).to_contain_text(name_b, timeout=ms(20))
    page.goto(f"{rw.url}/alerts/?state=firing")
    expect(page.locator("select[name=cluster]")).to_have_value("beta")
    expect(page.locator("#alerts tbody tr").first).to_contain_text("cluster beta",
                                                                   timeout=ms(20))
    shoot(page, "beta-alerts")
    page.select_option("#cluster-switch", "alpha")
    page.wait_for_load_state()
    expect(page.locator("select[name=cluster]")).to_have_value("alpha")
    expect(page.locator("#alerts tbody tr", has_text="cluster beta")).to_have_count(0)
    page.goto(f"{rw.url}/")  # triage, of alpha: nothing of beta's stall
    expect(page.locator("#live-state")).to_have_text("live", timeout=ms(20))
    expect(page.locator("main")).not_to_contain_text(name_b)
    page.select_option("#cluster-switch", "all")
    page.wait_for_load_state()
    expect(page.locator("main")).to_contain_text(name_b, timeout=ms(20))
    page.goto(f"{rw.url}/cluster/")
    expect(page.locator("#clusters-overview")).to_be_visible()
    # Each node's agent coverage is its own cluster's: beta's agent is not alpha's node's.
    # Alpha's head is raywatch's own host, whose agent is the one serve started.
    alpha_head = page.locator(f'#nodes tbody tr[data-node-id="{alpha_node_id}"] td.agent')
    expect(alpha_head).to_contain_text("raywatch's own host", timeout=ms(10))
    expect(alpha_head).not_to_contain_text("beta-head")
    beta_head = page.locator(f'#nodes tbody tr[data-node-id="{beta_cluster.node_id}"] td.agent')
    expect(beta_head).not_to_contain_text("raywatch's own host")


def shoot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    if SHOTS:
        screenshots(page, f"{SHOTS}/clusters-{name}")


def test_an_unknown_cluster_is_refused_with_the_known_ones(  # type: ignore[no-untyped-def]
        viewer, settings) -> None:
    from dashboard.cluster.models import Cluster
    from tests.conftest import token_client

    settings.CLUSTER_NAME = "alpha"
    Cluster.objects.create(name="alpha", first_seen_at="2026-11-25T00:00:00Z",
                           state_since="2026-11-25T00:00:00Z")
    client = token_client(viewer)
    for path in ("/api/nodes/", "/api/trials/", "/api/alerts/", "/api/jobs/", "/api/actors/",
                 "/api/demands/", "/api/audit/", "/api/gpus/", "/api/triage/", "/api/cluster/"):
        reply = client.get(f"{path}?cluster=nope")
        assert reply.status_code == 400, (path, reply.content)
        said = str(reply.json()["cluster"])
        assert "no cluster named 'nope' (known: " in said and "alpha" in said, (path, said)


def test_a_cluster_its_head_agent_announces_is_polled_once_approved(  # type: ignore[no-untyped-def]
        ray_cluster: LocalCluster, beta, tmp_path: Path) -> None:
    """beta's head agent announces beta (as a KubeRay sidecar would: its name and
    namespace from the environment); it waits for an admin, then is polled. alpha's own
    head agent announces alpha, which raywatch knows by its session: nothing new."""
    _, beta_cluster = beta
    env = {**embedded_env(tmp_path / "data"), **ALPHA, "RAY_ADDRESS": ray_cluster.gcs_address}
    token, password = first_run(env)
    heads = {name: said.strip() for name, said in zip(
        ("alpha", "beta"), manage_all(env, ("agent_token", "alpha-head"),
                                      ("agent_token", "beta-head")), strict=True)}
    with serving(env, token, password, tmp_path) as rw:
        temp_dirs = {"alpha": Path(ray_cluster.session_dir).parent,
                     "beta": Path(beta_cluster.session_dir).parent}
        # Two heads' agents, each of its own address (one node's address is one token's:
        # a second node claiming it is refused, issue 43 L2).
        agents = {name: agent_env(rw.url, heads[name], tmp_path, f"{name}-head",
                                  "127.0.0.1" if name == "alpha" else "127.0.0.2", gpus=0,
                                  RAYWATCH_RAY_TMP_DIR=str(temp_dirs[name]),
                                  RAY_CLUSTER_NAME="team-a" if name == "beta" else "",
                                  POD_NAMESPACE="ml")
                  for name in ("alpha", "beta")}
        with running_agent(agents["alpha"], tmp_path / "alpha.log"), \
                running_agent(agents["beta"], tmp_path / "beta.log"):
            announced = wait_for(lambda: next((c for c in rw.api("/api/clusters/")
                                               if c["origin"] == "registered"), None),
                                 60, 0.5, "beta's head agent to announce it",
                                 explain=lambda: (tmp_path / "beta.log").read_text()[-1500:])
            assert announced["name"] == "ml.team-a", announced
            assert announced["approval"] == "pending" and announced["nodes_alive"] == 0
            assert announced["kuberay"] == {"name": "team-a", "namespace": "ml"}
            assert announced["dashboard_url"] == beta_cluster.dashboard_url, announced
            time.sleep(3)  # a few more reports of both heads: still two clusters, one unpolled
            assert sorted(c["name"] for c in rw.api("/api/clusters/")) == ["alpha",
                                                                           "ml.team-a"]
            assert not [s for s in rw.api("/api/sources/") if s["scope"] == "ml.team-a"]

            approved = api_post(f"{rw.url}/api/clusters/ml.team-a/approve", token,
                                {"token": (Path.home() / ".ray" / "auth_token").read_text()})
            assert approved["approval"] == "approved", approved
            wait_for(lambda: state_of(rw, "ml.team-a")["nodes_alive"] == 1, 60, 0.5,
                     "the approved cluster to be polled",
                     explain=lambda: state_of(rw, "ml.team-a"))
            assert [n["node_id"] for n in rw.api("/api/nodes/?cluster=ml.team-a")] == [
                beta_cluster.node_id]
            # Its head's agent reports for it now.
            wait_for(lambda: "ml.team-a" in manage(env, "agent_token", "--list"), 30, 1,
                     "beta's head token to belong to the cluster it announced")


@pytest.mark.django_db
def test_silences_and_metrics_tell_clusters_apart(viewer, settings) -> None:  # type: ignore[no-untyped-def]
    """A silence for one cluster mutes only its incidents, and /metrics counts each
    cluster's incidents and trials under its own `cluster` label."""
    from datetime import timedelta

    from django.test import Client
    from django.utils import timezone
    from prometheus_client.parser import text_string_to_metric_families

    from dashboard.alerts.models import Silence, silenced_by
    from dashboard.cluster.models import Cluster
    from dashboard.incidents.models import Incident
    from dashboard.trials.models import Experiment, Trial

    settings.CLUSTER_NAME, settings.METRICS_TOKEN = "alpha", None  # loopback may scrape
    now = timezone.now()
    clusters = {n: Cluster.objects.create(name=n, first_seen_at=now, state_since=now)
                for n in ("alpha", "beta")}
    stalls = {n: Incident.objects.create(cluster=c, kind="trial_stalled", subject="trial:x/t",
                                         severity="critical", summary="stalled",
                                         opened_at=now, updated_at=now)
              for n, c in clusters.items()}  # one subject, two clusters: two incidents
    for c in clusters.values():
        Trial.objects.create(experiment=Experiment.objects.create(cluster=c, name="x"),
                             trial_id="t", status=Trial.RUNNING, last_result_at=now)
    silence = Silence.objects.create(cluster="be*", starts_at=now,
                                     ends_at=now + timedelta(hours=1), comment="maintenance")
    assert silenced_by(stalls["beta"], [silence]) == silence
    assert silenced_by(stalls["alpha"], [silence]) is None

    reply = Client().get("/metrics")
    assert reply.status_code == 200, reply.content
    families = {f.name: f.samples for f in text_string_to_metric_families(reply.content.decode())}
    stalled = {s.labels["cluster"]: s.value for s in families["raywatch_incidents_open"]
               if s.labels["kind"] == "trial_stalled" and s.labels["severity"] == "critical"}
    assert stalled == {"alpha": 1, "beta": 1}
    running = {(s.labels["cluster"], s.labels["experiment"]) for s in families["raywatch_trials"]
               if s.labels["status"] == "RUNNING" and s.value == 1}
    assert running == {("alpha", "x"), ("beta", "x")}
