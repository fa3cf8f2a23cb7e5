"""/metrics for Prometheus: scraped through Django as Prometheus would, parsed with
prometheus_client's own parser, and checked against what the API says of the same
state; its token and network rules; finished trials leave the per-trial series; the
scrape's queries do not grow with the fleet; and the Grafana dashboard and alert rules
in docs/ use only series a real scrape has."""

from __future__ import annotations

import gzip
import ipaddress
import json
import re
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import time_machine
import yaml
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from collectors.records import GpuPoll, GpuProcessRecord, GpuSampleRecord
from dashboard.cluster.models import Cluster, Node
from dashboard.core.health import record
from dashboard.gpus.ingest import ingest_gpu_poll
from dashboard.incidents.models import Incident
from dashboard.trials.models import Experiment, Trial
from tests.agents import report_gpus
from tests.conftest import mark_ray_current, token_client
from tests.test_actions_imports import graph
from tests.test_gpu_detectors import actor, node

pytestmark = [pytest.mark.both_backends, pytest.mark.django_db]
ROOT = Path(__file__).resolve().parent.parent
GIB = 1024**3
Series = dict[tuple[str, ...], float]
# What Prometheus 3 sends: OpenMetrics first, the text format as a fallback.
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
                     "application/openmetrics-text;version=0.0.1;q=0.5,"
                     "text/plain;version=0.0.4;q=0.3,*/*;q=0.2")


# --- scraping ---------------------------------------------------------------------------------
def scrape(client: Client | None = None, **headers: str) -> dict[str, list[Any]]:
    """Every family of a scrape, by name: its samples (name, labels, value)."""
    response = (client or Client()).get("/metrics", **headers)
    assert response.status_code == 200, response.content
    return {f.name: f.samples for f in text_string_to_metric_families(response.content.decode())}


def series(families: dict[str, list[Any]], name: str, *labels: str) -> Series:
    """One family's samples keyed by the values of `labels`."""
    return {tuple(s.labels[label] for label in labels): s.value for s in families[name]}


def api(client: Client, path: str) -> Any:
    response = client.get(f"{path}{'&' if '?' in path else '?'}page_size=1000")
    assert response.status_code == 200, response.content
    return response.json()


# --- seeding ----------------------------------------------------------------------------------
def trial(experiment: Experiment, trial_id: str, status: str, pid: int | None = None,
          result_ago_s: float | None = None, **extra: Any) -> Trial:
    last = None if result_ago_s is None else timezone.now() - timedelta(seconds=result_ago_s)
    return Trial.objects.create(experiment=experiment, trial_id=trial_id, status=status,
                                pid=pid, node_ip="10.0.0.5", last_result_at=last, **extra)


def incident(kind: str, subject: str, severity: str, state: str = Incident.FIRING) -> None:
    now = timezone.now()
    Incident.objects.create(kind=kind, subject=subject, severity=severity, state=state,
                            summary=f"{kind} on {subject}", opened_at=now, updated_at=now)


@pytest.fixture
def cluster(fake_gpus) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """A node of five GPUs read through the fake pynvml: two hold trial grpo/a's
    process, one trial grpo/b's, one an evaluator actor's, one a process no Ray worker
    owns; trials of every status in grpo and a search finished two days ago; incidents
    firing and resolved; a failing source."""
    node(gpus=5)
    actor(5000, job_id="02000000")
    actor(5001)
    actor(6000, repr_name="Evaluator", job_id="03000000")
    grpo = Experiment.objects.create(name="grpo")
    trial(grpo, "a_00000", Trial.RUNNING, 5000, result_ago_s=30, last_step_s=12.5)
    trial(grpo, "b_00001", Trial.RUNNING, 5001, result_ago_s=900, last_step_s=8.0)
    trial(grpo, "c_00002", Trial.RUNNING)  # no result yet
    trial(grpo, "d_00003", Trial.PENDING)
    trial(grpo, "e_00004", Trial.TERMINATED, 4000, result_ago_s=3000, last_step_s=9.0)
    trial(grpo, "f_00005", Trial.ERROR, 4001, result_ago_s=2000)
    old = Experiment.objects.create(name="last-week")
    for n in range(3):
        trial(old, f"old_{n:05d}", Trial.TERMINATED, result_ago_s=200_000)
    Trial.objects.filter(experiment=old).update(updated_at=timezone.now() - timedelta(days=2))
    for index, processes in enumerate([[(5000, 30 * GIB)], [(5000, 30 * GIB)],
                                       [(5001, 20 * GIB)], [(6000, 5 * GIB)],
                                       [(7000, 2 * GIB)]]):
        fake_gpus.add_gpu(uuid=f"GPU-{index}", util=10 * index + 5,
                          mem_used=sum(m for _, m in processes), temp=40 + index,
                          power_mw=100_000 + 1000 * index, processes=processes)
    mark_ray_current()
    report_gpus()
    incident("trial_stalled", "trial:grpo/b_00001", "critical")
    incident("gpu_orphan_memory", "gpu:GPU-4/7000", "warning")
    incident("gpu_memory_high", "gpu:GPU-0", "warning")
    incident("gpu_memory_high", "gpu:GPU-1", "warning", state=Incident.RESOLVED)
    record("trial_logs", "", 2.0, 1500.0, "cannot read ~/ray_results: permission denied", [])
    return {"fake_gpus": fake_gpus, "grpo": grpo}


# --- what a scrape says -----------------------------------------------------------------------
def test_gpu_series_match_the_gpu_api(cluster, viewer, settings) -> None:  # type: ignore[no-untyped-def]
    settings.CLUSTER_NAME = "lab-a"  # as if raywatch had been started with it
    Cluster.objects.filter(name="default").update(name="lab-a")
    families = scrape()
    gpus = api(token_client(viewer), "/api/gpus/")
    assert len(gpus) == 5
    keys = ("uuid", "node", "node_ip", "gpu", "simulated")
    for name, field, scale in [("raywatch_gpu_utilization_ratio", "utilization", 100),
                               ("raywatch_gpu_memory_used_bytes", "memory_used", 1),
                               ("raywatch_gpu_memory_total_bytes", "memory_total", 1),
                               ("raywatch_gpu_temperature_celsius", "temperature", 1),
                               ("raywatch_gpu_power_watts", "power", 1)]:
        assert series(families, name, *keys) == {
            (g["uuid"], g["node"], g["node_ip"], str(g["index"]), "false"): g[field] / scale
            for g in gpus}, name
    owners = series(families, "raywatch_gpu_power_watts", "uuid", "owner_kind", "trial",
                    "actor", "job")
    assert set(owners) == {
        ("GPU-0", "trial", "a_00000", "actor00005000", "02000000"),
        ("GPU-1", "trial", "a_00000", "actor00005000", "02000000"),
        ("GPU-2", "trial", "b_00001", "actor00005001", ""),
        ("GPU-3", "actor", "", "actor00006000", "03000000"),
        ("GPU-4", "orphan", "", "", ""),
    }
    for g in gpus:  # the same owners the API gives each GPU's processes
        kinds = {p["owner"]["kind"] for p in g["processes"]}
        assert {k for (uuid, k, *_) in owners if uuid == g["uuid"]} == kinds
    assert series(families, "raywatch_gpus", "state") == {
        (state,): float(Counter(g["state"] for g in gpus)[state])
        for state in ("stale", "hardware", "orphan", "hot", "idle", "free", "busy")}
    assert series(families, "raywatch_gpus", "state")[("orphan",)] == 1
    every = [s for samples in families.values() for s in samples]
    assert every and {s.labels["cluster"] for s in every} == {"lab-a"}


def test_trial_series_match_the_trial_api(cluster, viewer) -> None:  # type: ignore[no-untyped-def]
    frozen = timezone.now()
    with time_machine.travel(frozen, tick=False):
        families = scrape()
    trials = api(token_client(viewer), "/api/trials/")
    by_status = series(families, "raywatch_trials", "experiment", "status")
    counted = Counter((t["experiment"], t["status"]) for t in trials
                      if t["experiment"] == "grpo")
    assert by_status == {("grpo", status): float(counted[("grpo", status)])
                         for status in ("PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR",
                                        "UNKNOWN")}
    assert by_status[("grpo", "RUNNING")] == 3
    # A search whose trials all ended two days ago is not exported any more.
    assert not [key for key in by_status if key[0] == "last-week"]
    running = [t for t in trials if t["status"] == "RUNNING"]
    silence = series(families, "raywatch_trial_seconds_since_last_result", "experiment", "trial")
    assert silence == {
        (t["experiment"], t["trial_id"]):
            (frozen - datetime.fromisoformat(t["last_result_at"])).total_seconds()
        for t in running if t["last_result_at"]}
    # Seeded 900 s and 30 s before the seeding's clock: the gap between them survives however
    # long a loaded machine took between seeding and scraping.
    assert silence[("grpo", "b_00001")] >= 900
    assert silence[("grpo", "b_00001")] - silence[("grpo", "a_00000")] == pytest.approx(870, abs=1)
    assert series(families, "raywatch_trial_last_step_seconds", "trial") == {
        (t["trial_id"],): t["last_step_s"] for t in running if t["last_step_s"] is not None}


def test_incident_and_source_series_match_the_api(cluster, viewer) -> None:  # type: ignore[no-untyped-def]
    families = scrape()
    client = token_client(viewer)
    firing = Counter((i["kind"], i["severity"]) for i in api(client, "/api/alerts/?state=firing"))
    incidents = series(families, "raywatch_incidents_open", "kind", "severity")
    assert {key: value for key, value in incidents.items() if value} == {
        key: float(n) for key, n in firing.items()}
    assert incidents[("gpu_memory_high", "warning")] == 1  # the resolved one is not counted
    assert incidents[("trial_process_gone", "critical")] == 0  # known kinds are there at 0
    sources = {s["label"]: s for s in api(client, "/api/sources/")}
    errors = series(families, "raywatch_source_error", "source", "scope")
    assert errors == {(s["source"], s["scope"]): float(s["state"] == "down")
                      for s in sources.values()}
    assert errors[("trial_logs", "")] == 1 and errors[("ray", "")] == 0
    durations = series(families, "raywatch_source_poll_duration_seconds", "source", "scope")
    assert durations[("trial_logs", "")] == 1.5
    assert durations == {(s["source"], s["scope"]): s["last_duration_ms"] / 1000
                         for s in sources.values() if s["last_duration_ms"] is not None}
    ages = series(families, "raywatch_source_last_success_age_seconds", "source")
    assert ("trial_logs",) not in ages  # it never polled successfully
    assert set(ages) == {("ray",), ("nvml",)}


def test_finished_trials_leave_the_per_trial_series(cluster) -> None:  # type: ignore[no-untyped-def]
    before = scrape()
    assert ("a_00000",) in series(before, "raywatch_trial_seconds_since_last_result", "trial")
    Trial.objects.filter(trial_id="a_00000").update(status=Trial.TERMINATED)
    after = scrape()
    for name in ("raywatch_trial_seconds_since_last_result", "raywatch_trial_last_step_seconds"):
        assert ("a_00000",) not in series(after, name, "trial"), name
        assert ("e_00004",) not in series(after, name, "trial"), name  # finished from the start
    statuses = series(after, "raywatch_trials", "experiment", "status")
    assert statuses[("grpo", "TERMINATED")] == 2 and statuses[("grpo", "RUNNING")] == 2


def test_prometheus_formats_and_compression_carry_the_same_values(cluster) -> None:  # type: ignore[no-untyped-def]
    frozen = timezone.now()
    with time_machine.travel(frozen, tick=False):
        plain = scrape()
        response = Client().get("/metrics", HTTP_ACCEPT=PROMETHEUS_ACCEPT,
                                HTTP_ACCEPT_ENCODING="gzip")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response["Content-Encoding"] == "gzip"
    text = gzip.decompress(response.content).decode()
    assert text.rstrip().endswith("# EOF")
    open_metrics = {f.name: f.samples for f in openmetrics_families(text)}
    assert {name: series(open_metrics, name, *sorted(samples[0].labels))
            for name, samples in plain.items() if samples} == {
        name: series(plain, name, *sorted(samples[0].labels))
        for name, samples in plain.items() if samples}


# --- who may scrape ---------------------------------------------------------------------------
def status_of(address: str, authorization: str | None = None) -> tuple[int, str]:
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    response = Client(REMOTE_ADDR=address).get("/metrics", **headers)
    return response.status_code, response.content.decode()


def test_without_a_token_only_the_allowed_networks_may_scrape(settings) -> None:  # type: ignore[no-untyped-def]
    settings.METRICS_TOKEN = None
    assert status_of("127.0.0.1")[0] == 200
    assert status_of("::1")[0] == 200
    assert status_of("::ffff:127.0.0.1")[0] == 200  # IPv4 on a dual-stack socket
    code, body = status_of("10.1.2.3")
    assert code == 403
    assert "RAYWATCH_METRICS_ALLOW" in body and "RAYWATCH_METRICS_TOKEN" in body
    assert "raywatch_" not in body
    settings.METRICS_ALLOW = (ipaddress.ip_network("10.0.0.0/8"),)
    assert status_of("10.1.2.3")[0] == 200
    assert status_of("127.0.0.1")[0] == 403
    assert status_of("")[0] == 403


def test_with_a_token_only_its_bearer_may_scrape(settings) -> None:  # type: ignore[no-untyped-def]
    settings.METRICS_TOKEN = "s3cret-scrape-token"
    for authorization in (None, "Bearer wrong", "Token s3cret-scrape-token",
                          "Bearer s3cret-scrape-token-and-more"):
        response = Client().get("/metrics", **({"HTTP_AUTHORIZATION": authorization}
                                               if authorization else {}))
        assert response.status_code == 401, authorization
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert b"RAYWATCH_METRICS_TOKEN" in response.content
        assert b"raywatch_" not in response.content
    # The token opens it from anywhere, the loopback-only default notwithstanding.
    code, body = status_of("10.9.9.9", "Bearer s3cret-scrape-token")
    assert code == 200 and "raywatch_incidents_open" in body


def test_a_scraper_speaking_http_is_not_redirected_to_https(settings) -> None:  # type: ignore[no-untyped-def]
    """Behind secure cookies plain HTTP is redirected, but Prometheus inside the network
    scrapes over HTTP (a redirect would come after it sent its token anyway)."""
    settings.SECURE_SSL_REDIRECT = True
    assert Client().get("/alerts/").status_code == 301
    assert Client().get("/metrics").status_code == 200


# --- cost -------------------------------------------------------------------------------------
def fleet(nodes: int, gpus_per_node: int, trials_per_gpu: int = 1) -> None:
    """`nodes` Ray nodes whose GPUs each hold one RUNNING trial's process (an actor
    of its own), plus finished trials, incidents and an NVML source per node."""
    now = timezone.now()
    mark_ray_current()
    search = Experiment.objects.create(name=f"search-{nodes}x{gpus_per_node}")
    first = Node.objects.count()
    for n in range(first, first + nodes):
        ip, pid0 = f"10.0.{n}.5", 10_000 + 100 * n
        node(f"node-{n}", ip, gpus=gpus_per_node)
        records = []
        for index in range(gpus_per_node):
            pid = pid0 + index
            actor(pid, node_id=f"node-{n}")
            for t in range(trials_per_gpu):
                Trial.objects.create(
                    experiment=search, trial_id=f"{n}_{index}_{t}", status=Trial.RUNNING,
                    pid=pid if t == 0 else None, node_ip=ip, last_result_at=now,
                    last_step_s=3.0)
            Trial.objects.create(experiment=search, trial_id=f"{n}_{index}_done",
                                 status=Trial.TERMINATED, node_ip=ip)
            records.append(GpuSampleRecord(
                node=f"gpu-node-{n}", gpu_index=index, uuid=f"GPU-{n}-{index}", at=now,
                utilization_gpu=50.0, memory_used_bytes=GIB, memory_total_bytes=80 * GIB,
                temperature_c=50.0, power_w=300.0, throttle_reasons=(),
                processes=(GpuProcessRecord(pid=pid, used_memory_bytes=GIB),)))
        ingest_gpu_poll(GpuPoll(node=f"gpu-node-{n}", at=now, gpus=tuple(records)), ip, now)
        record("nvml", f"gpu-node-{n}", 1.0, 20.0, None, [])
        incident("gpu_memory_high", f"gpu:GPU-{n}-0", "warning")


def scrape_queries() -> tuple[int, dict[str, list[Any]]]:
    with CaptureQueriesContext(connection) as queries:
        families = scrape()
    return len(queries), families


def test_a_scrape_makes_the_same_queries_for_5_gpus_or_50() -> None:
    fleet(nodes=1, gpus_per_node=5)
    small, small_families = scrape_queries()
    assert len(small_families["raywatch_gpu_utilization_ratio"]) == 5
    fleet(nodes=9, gpus_per_node=5, trials_per_gpu=2)
    large, families = scrape_queries()
    assert len(families["raywatch_gpu_utilization_ratio"]) == 50
    assert len(families["raywatch_trial_last_step_seconds"]) == 5 + 90
    assert set(series(families, "raywatch_gpu_utilization_ratio", "owner_kind")) == {("trial",)}
    assert len(families["raywatch_source_error"]) == 1 + 10
    assert large == small, f"{small} queries for 5 GPUs, {large} for 50"


# --- docs: the Grafana dashboard and the alert rules ------------------------------------------
METRIC_NAME = re.compile(r"\braywatch_[a-z0-9_]+")


def dashboard_queries() -> list[str]:
    board = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", ())]
    exprs += [v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
              for v in board["templating"]["list"] if v["type"] == "query"]
    return exprs


def alert_rules() -> list[dict[str, Any]]:
    rules = yaml.safe_load((ROOT / "docs" / "prometheus-rules.yml").read_text())
    return [rule for group in rules["groups"] for rule in group["rules"]]


def test_grafana_dashboard_and_alert_rules_use_only_exported_series(cluster) -> None:  # type: ignore[no-untyped-def]
    families = scrape()
    exported = {name for name, samples in families.items() if samples}
    board = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    titles = " | ".join(p["title"].lower() for p in board["panels"])
    for topic in ("gpu utilization", "idle gpus", "silen", "open incidents"):
        assert topic in titles, topic
    used = {name for expr in dashboard_queries() for name in METRIC_NAME.findall(expr)}
    assert {"raywatch_gpu_utilization_ratio", "raywatch_trial_seconds_since_last_result",
            "raywatch_incidents_open"} <= used
    assert used - exported == set(), "the dashboard queries series /metrics does not export"
    rules = alert_rules()
    alerts = {rule["alert"] for rule in rules}
    assert {"RaywatchTrialHung", "RaywatchGpusIdleDuringStep"} <= alerts
    for rule in rules:
        assert rule["labels"]["severity"] and rule["annotations"]["summary"], rule["alert"]
        names = set(METRIC_NAME.findall(rule["expr"]))
        assert names and names <= exported, (rule["alert"], names - exported)


def test_only_the_urls_import_the_metrics_app() -> None:
    importers = {mod for mod, names in graph("dashboard").items()
                 if not mod.startswith("dashboard.metrics")
                 and any(n.startswith("dashboard.metrics") for n in names)}
    assert importers == {"dashboard.urls"}
