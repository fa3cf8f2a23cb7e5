"""The stand-in for Ray's state API (tests/raystandin.py), which the row-cap test and
bench use in place of 20,000 actors, answers the way a real Ray 2.60 cluster does: the
same envelope and row columns, and the same truncation counts when Ray cuts a list.

The real cluster here is a small one whose head runs with RAY_MAX_LIMIT_FROM_DATA_SOURCE
at SOURCE_LIMIT, so that its GCS cuts its lists at a few rows exactly as it cuts them at
10,000; the stand-in holds the same actors and placement groups and cuts at the same
number. Both are asked what raywatch's Ray poll asks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from collectors.http import SourceError
from collectors.localray import LocalRay
from collectors.raylists import list_query, rows_of, was_cut
from collectors.raystate import RayEndpoint, fetch_json, fetch_list
from tests.raystandin import (
    Cluster,
    RayStandIn,
    actor_row,
    cluster_of,
    job_row,
    placement_group_row,
    worker_row,
)
from tests.test_ray_demand import endpoint_for

pytestmark = pytest.mark.ray

SOURCE_LIMIT = 4
# What each side holds: job A (the test's driver) 6 ALIVE actors, 1 waiting for a GPU
# (PENDING_CREATION) and 2 killed (DEAD); job B (a second driver) 3 ALIVE actors;
# 5 placement groups, 1 of them removed.
JOB_A_ALIVE, JOB_B_ALIVE, PENDING, DEAD, GROUPS, REMOVED = 6, 3, 1, 2, 5, 1

JOB_B_DRIVER = """
import sys, time, ray
ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False)
@ray.remote(num_cpus=0)
class B:
    def ping(self):
        return 1
bs = [B.remote() for _ in range(int(sys.argv[2]))]
ray.get([b.ping.remote() for b in bs])
print(ray.get_runtime_context().get_job_id(), flush=True)
while True:
    time.sleep(1)
"""


@dataclass(frozen=True)
class Side:
    endpoint: RayEndpoint
    job_a: str
    job_b: str

    def actors(self, *filters: tuple[str, str, str], limit: int = 10_000) -> dict[str, Any]:
        query = list_query(*filters).replace("limit=10000", f"limit={limit}")
        return fetch_json(self.endpoint, f"/api/v0/actors?{query}")


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    """A real cluster cut at SOURCE_LIMIT rows, holding the actors described above."""
    where = tmp_path_factory.mktemp("capped-ray")
    temp_dir = Path(tempfile.mkdtemp(prefix="rwcap-", dir="/tmp"))  # short: socket paths
    local = LocalRay(where / "local-ray.json", num_cpus=1, temp_dir=temp_dir,
                     log_monitor=False)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_MAX_LIMIT_FROM_DATA_SOURCE", str(SOURCE_LIMIT))
        cluster = local.start(log_path=where / "local-ray.log")
    import ray

    driver_b = None
    try:
        env_b = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        driver_b = subprocess.Popen(
            [sys.executable, "-c", JOB_B_DRIVER, cluster.gcs_address, str(JOB_B_ALIVE)],
            stdout=subprocess.PIPE, text=True, env=env_b)
        ray.init(address=cluster.gcs_address, log_to_driver=False, configure_logging=False)
        job_a, _handles = _populate(ray)  # the handles keep the actors alive
        assert driver_b.stdout is not None
        job_b = driver_b.stdout.readline().strip()
        assert job_b, "job B's driver did not start"
        yield Side(endpoint_for(cluster.dashboard_url), job_a, job_b)
    finally:
        ray.shutdown()
        os.environ.pop("RAY_ADDRESS", None)  # ray.init() exported it for this process
        if driver_b is not None:
            driver_b.kill()
            driver_b.wait()
        local.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _populate(ray: Any) -> tuple[str, list[Any]]:
    from ray.util.placement_group import placement_group, remove_placement_group

    @ray.remote(num_cpus=0)
    class A:
        def ping(self) -> int:
            return 1

    @ray.remote(num_gpus=1)
    class NeedsGpu:
        pass

    actors = [A.remote() for _ in range(JOB_A_ALIVE + DEAD)]
    ray.get([a.ping.remote() for a in actors])
    for actor in actors[JOB_A_ALIVE:]:
        ray.kill(actor, no_restart=True)
    pending = [NeedsGpu.remote() for _ in range(PENDING)]
    groups = [placement_group([{"CPU": 0.01}]) for _ in range(GROUPS)]
    ray.get([g.ready() for g in groups])
    for group in groups[GROUPS - REMOVED:]:
        remove_placement_group(group)
    return str(ray.get_runtime_context().get_job_id()), [*actors, *pending, *groups]


@pytest.fixture(scope="module")
def stand_in() -> Iterator[Side]:
    job_a, job_b = "02000000", "03000000"
    actors = [actor_row(n, job_a) for n in range(JOB_A_ALIVE)]
    actors += [actor_row(100 + n, job_a, "PENDING_CREATION") for n in range(PENDING)]
    actors += [actor_row(200 + n, job_b) for n in range(JOB_B_ALIVE)]
    actors += [actor_row(300 + n, job_a, "DEAD") for n in range(DEAD)]
    groups = [placement_group_row(n, job_a) for n in range(GROUPS - REMOVED)]
    groups += [placement_group_row(100 + n, job_a, "REMOVED") for n in range(REMOVED)]
    cluster = Cluster(actors=actors, workers=[worker_row(a) for a in actors if a["pid"]],
                      jobs=[job_row(job_a), job_row(job_b)],
                      nodes=cluster_of(1, 1).nodes, placement_groups=groups)
    with RayStandIn(cluster, source_limit=SOURCE_LIMIT).running() as url:
        yield Side(RayEndpoint(url), job_a, job_b)


def counts(reply: dict[str, Any]) -> dict[str, Any]:
    body = reply["data"]["result"]
    return {"total": body["total"], "num_after_truncation": body["num_after_truncation"],
            "num_filtered": body["num_filtered"], "rows": len(rows_of(reply)),
            "cut": was_cut(reply)}


def columns(reply: dict[str, Any]) -> dict[str, str]:
    """Each field of a list reply, its envelope's and a running entry's, with its type
    (a pending actor's node_id is None)."""
    body = reply["data"]["result"]
    row = next(r for r in rows_of(reply) if r.get("state", "ALIVE") in ("ALIVE", "CREATED"))
    fields = {f"envelope.{k}": type(v).__name__ for k, v in reply.items()}
    fields |= {f"body.{k}": type(v).__name__ for k, v in body.items()}
    return fields | {f"row.{k}": type(v).__name__ for k, v in row.items()}


def test_live_actors_cut_at_the_source_are_reported_alike(real: Side, stand_in: Side) -> None:
    # 10 live actors, the source sends 4: total counts the dead too; nothing says which
    # 6 are missing.
    expected = {"total": 12, "num_after_truncation": 4, "num_filtered": 4, "rows": 4,
                "cut": True}
    for side in (real, stand_in):
        assert counts(side.actors(("state", "!=", "DEAD"))) == expected


def test_filters_the_gcs_applies_itself_get_past_the_cut(real: Side, stand_in: Side) -> None:
    for side in (real, stand_in):
        # Under the cut: the GCS went through every actor, skipping the others.
        assert counts(side.actors(("state", "=", "ALIVE"), ("job_id", "=", side.job_b))) == {
            "total": 12, "num_after_truncation": 12, "num_filtered": 3, "rows": 3, "cut": False}
        assert counts(side.actors(("state", "=", "PENDING_CREATION"))) == {
            "total": 12, "num_after_truncation": 12, "num_filtered": 1, "rows": 1, "cut": False}
        # Still past it: 6 ALIVE in job A, 4 sent, and the reply says it was cut.
        cut = counts(side.actors(("state", "=", "ALIVE"), ("job_id", "=", side.job_a)))
        assert (cut["rows"], cut["num_filtered"], cut["cut"]) == (4, 4, True)
        assert SOURCE_LIMIT <= cut["num_after_truncation"] < 12


def test_a_limit_under_what_passed_is_reported_alike(real: Side, stand_in: Side) -> None:
    for side in (real, stand_in):
        assert counts(side.actors(("state", "!=", "DEAD"), limit=2)) == {
            "total": 12, "num_after_truncation": 4, "num_filtered": 4, "rows": 2, "cut": True}


def test_a_limit_over_the_cap_is_refused_alike(real: Side, stand_in: Side) -> None:
    refusals = []
    for side in (real, stand_in):
        with pytest.raises(SourceError) as refused:
            fetch_json(side.endpoint, "/api/v0/actors?limit=10001")
        refusals.append((refused.value.status, refused.value.body))
    assert refusals[0] == refusals[1]


@pytest.mark.parametrize("path", [
    f"/api/v0/actors?{list_query(('state', '!=', 'DEAD'))}",
    f"/api/v0/workers?{list_query(('is_alive', '=', 'true'), detail=False)}",
    f"/api/v0/placement_groups?{list_query(('state', '!=', 'REMOVED'))}",
    f"/api/v0/nodes?{list_query()}",
])
def test_list_replies_have_rays_columns(real: Side, stand_in: Side, path: str) -> None:
    real_reply, fake_reply = (fetch_json(s.endpoint, path) for s in (real, stand_in))
    assert columns(fake_reply) == columns(real_reply)
    assert was_cut(fake_reply) == was_cut(real_reply)


def test_placement_groups_cut_at_the_source_are_reported_alike(real: Side,
                                                               stand_in: Side) -> None:
    path = f"/api/v0/placement_groups?{list_query(('state', '!=', 'REMOVED'))}"
    for side in (real, stand_in):
        got = counts(fetch_json(side.endpoint, path))
        # The removed one is filtered out after the cut, if the source sent it at all.
        assert (got["total"], got["num_after_truncation"], got["cut"]) == (5, 4, True)
        assert got["rows"] == got["num_filtered"] in (3, 4)


def test_jobs_and_start_times_have_rays_fields(real: Side, stand_in: Side) -> None:
    real_jobs, fake_jobs = (fetch_list(s.endpoint, "/api/jobs/") for s in (real, stand_in))
    real_job = next(j for j in real_jobs if j["job_id"] == real.job_a)
    assert set(fake_jobs[0]) <= set(real_job)
    assert set(fake_jobs[0]["driver_info"]) <= set(real_job["driver_info"])
    ids = [rows_of(s.actors(("state", "=", "ALIVE"), ("job_id", "=", s.job_b)))[0]["actor_id"]
           for s in (real, stand_in)]
    entries = [fetch_json(s.endpoint, f"/logical/actors?ids={i}")["data"]["actors"][i]
               for s, i in zip((real, stand_in), ids, strict=True)]
    assert {k: type(entries[0][k]) for k in entries[1]} == {k: type(v) for k, v in
                                                             entries[1].items()}


def test_the_version_names_the_session_alike(real: Side, stand_in: Side) -> None:
    """raywatch tells a restarted head apart by this reply's session_name."""
    real_version, fake_version = (fetch_json(s.endpoint, "/api/version") for s in (real, stand_in))
    assert {k: type(v) for k, v in fake_version.items()} == \
        {k: type(v) for k, v in real_version.items()}
    assert real_version["ray_version"] == fake_version["ray_version"] == "2.60.0"
    assert real_version["session_name"].startswith("session_")


def test_the_source_limit_is_the_heads(real: Side) -> None:
    """The real side really is cut by its GCS, not by `limit`: the test means nothing
    otherwise."""
    reply = real.actors()
    assert counts(reply)["num_after_truncation"] == SOURCE_LIMIT < counts(reply)["total"]
