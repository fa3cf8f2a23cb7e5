"""Trial logs through the node agent: a real Tune experiment's directory, readable only
by the agent (raywatch itself reads no log dir), reaches the API through
`python -m collectors.agent`; lines written later arrive; a restart of the agent, even a
SIGKILL, neither loses nor doubles a line; one directory seen by two nodes' agents
(a shared filesystem) is stored once; a malformed trial_log record is refused with its
seq and the agent's other batches still arrive."""

from __future__ import annotations

import ast
import json
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from django.contrib.auth.models import User
from django.db import OperationalError
from django.test import Client
from django.utils import timezone
from websockets.sync.client import ClientConnection, connect

from collectors.agent import wire
from collectors.agent.client import call
from collectors.hostinfo import host_name
from collectors.localray import LocalCluster, free_port
from dashboard.agents import tokens
from dashboard.trials.models import Experiment, StepResult, Trial
from tests.agents import agent_env, running_agent, stop_agent
from tests.conftest import LiveServer, start_search, token_client, wait_for
from tests.patience import patient
from tests.served import (
    api_get,
    embedded_env,
    manage,
    manage_all,
    migrate,
    start_serve,
    stop_serve,
)

pytestmark = pytest.mark.django_db(transaction=True)
NAME = "agent_search"
T = TypeVar("T")


@pytest.fixture(scope="module")
def tune_output(ray_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What a real Tune run leaves: three trials of six results (tests/tune_scripts)."""
    storage = tmp_path_factory.mktemp("tune")
    search = start_search(ray_cluster, storage, NAME, "quick")
    assert search.wait(patient(240)) == 0, "the Tune search failed"
    return storage / NAME


@pytest.fixture
def logs(tune_output: Path, tmp_path: Path, settings) -> Path:  # type: ignore[no-untyped-def]
    """A copy of the experiment in a dir only the agent is told about; raywatch's own
    reading of log dirs is off (docker-compose's setting)."""
    settings.CENTRAL_LOGS = False
    settings.LOG_DIRS = []
    root = tmp_path / "node-logs"
    shutil.copytree(tune_output, root / NAME)
    return root


def node(url: str, tmp_path: Path, name: str, logs: Path) -> dict[str, str]:
    """`make agent` on node `name`: its token and RAYWATCH_LOG_DIRS (its home and Ray temp
    dir are empty ones: it reads nothing else of this host)."""
    token = tokens.issue(name, None, timezone.now())[1]
    ip = {"gpu-a": "10.9.0.2", "gpu-b": "10.9.0.3"}[name]
    return agent_env(url, token, tmp_path, name, ip, gpus=0, RAYWATCH_LOG_DIRS=str(logs),
                     RAYWATCH_POLL_LOGS_S="0.5", RAYWATCH_GPU_SOURCE="off")


def result_files(logs: Path) -> dict[str, Path]:
    return {p.parent.name.split("_", 1)[1][:11]: p for p in logs.glob(f"{NAME}/*/result.json")}


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def append(path: Path, count: int) -> None:
    """More results, as the trainable would have reported them."""
    last = lines(path)[-1]
    with path.open("a") as out:
        for i in range(1, count + 1):
            it = last["training_iteration"] + i
            out.write(json.dumps({**last, "training_iteration": it, "score": it * 10.0,
                                  "timestamp": last["timestamp"] + i}) + "\n")


def unlocked(read: Callable[[], T]) -> T | None:
    """`read()`, or None while the test database is busy: on SQLite pytest's database is
    in memory with a shared cache, where a reader fails at once beside a writer."""
    try:
        return read()
    except OperationalError:
        return None


def stored(api, trial_id: str) -> list[tuple[int, int, float]]:  # type: ignore[no-untyped-def]
    pk = unlocked(lambda: Trial.objects.filter(trial_id=trial_id).values_list("pk", flat=True)
                  .first())
    reply = unlocked(lambda: api.get(f"/api/trials/{pk}/results/")) if pk else None
    if reply is None or reply.status_code != 200:
        return []
    return [(r["attempt"], r["iteration"], r["metrics"]["score"]) for r in reply.json()]


def expected(path: Path) -> list[tuple[int, int, float]]:
    return [(1, line["training_iteration"], line["score"]) for line in lines(path)]


def all_arrived(api, files: dict[str, Path]) -> bool:  # type: ignore[no-untyped-def]
    return all(stored(api, tid) == expected(path) for tid, path in files.items())


def counts(files: dict[str, Path]) -> dict[str, tuple[int, int]]:
    """Per trial: StepResult rows stored, lines in its result.json."""
    return {tid: (StepResult.objects.filter(trial__trial_id=tid).count(), len(lines(path)))
            for tid, path in files.items()}


def open_trial_page(server: LiveServer, user: User, pk: int) -> ClientConnection:
    """The trial page's websocket, as the browser opens it (session cookie, Origin)."""
    client = Client()
    client.force_login(user)
    headers = {"Origin": server.url, "Cookie": f"sessionid={client.cookies['sessionid'].value}"}
    return connect(f"ws://127.0.0.1:{server.port}/ws/trials/{pk}/",
                   additional_headers=headers, open_timeout=10)


def receive_points(page: ClientConnection) -> list[dict]:
    while True:
        message = json.loads(page.recv(timeout=15))
        if message["topic"] == "points":
            return message["data"]


def spooled_results(env: dict[str, str]) -> list[tuple[str, int, int]]:
    """The results in the agent's spool, batch by batch; [] while it holds none."""
    found = []
    for batch in sorted(Path(env["RAYWATCH_AGENT_SPOOL"]).glob("*.batch.json")):
        for record in json.loads(batch.read_text())["records"]:
            if record["kind"] == wire.TRIAL_LOG:
                found.append(record)
    return [(r["trial_id"], x["attempt"], x["iteration"]) for r in found
            for x in r["results"]] if found else []


@pytest.fixture
def agent_log(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "agent.log"


def test_a_real_tune_experiment_reaches_the_api_through_the_agent_and_a_restart_loses_nothing(
        live_server_asgi: LiveServer, admin: User, logs: Path, tmp_path: Path,
        agent_log: Path) -> None:
    api = token_client(admin)
    files = result_files(logs)
    assert len(files) == 3 and all(len(lines(p)) == 6 for p in files.values())
    env = node(live_server_asgi.url, tmp_path, "gpu-a", logs)
    explain = lambda: agent_log.read_text()[-3000:]  # noqa: E731

    with running_agent(env, agent_log) as agent:
        wait_for(lambda: all_arrived(api, files), 60, 0.2, "the trials' results", explain)
        trials = {t["trial_id"]: t for t in wait_for(
            lambda: unlocked(lambda: api.get(f"/api/trials/?experiment={NAME}").json()))}
        assert set(trials) == set(files)
        for tid, path in files.items():
            last = lines(path)[-1]
            assert trials[tid]["iteration"] == 6
            assert trials[tid]["config"]["lr"] == last["config"]["lr"]  # params.json
            assert trials[tid]["tune_status"] == "TERMINATED"  # Tune's experiment state
            assert trials[tid]["node_ip"] == last["node_ip"] and trials[tid]["pid"] == last["pid"]
        experiment = wait_for(lambda: unlocked(lambda: Experiment.objects.get(name=NAME)))
        assert experiment.paths == [f"gpu-a:{logs / NAME}"]

        # Lines written later arrive, and reach an open trial page as new points.
        one, two, three = sorted(files)
        with open_trial_page(live_server_asgi, admin, trials[one]["id"]) as page:
            written = time.monotonic()
            append(files[one], 3)
            points = receive_points(page)
            print(f"line written to points on its page: {time.monotonic() - written:.2f} s")
        assert [p["iteration"] for p in points][:1] == [7]
        wait_for(lambda: all_arrived(api, files), 30, 0.2, "the appended lines", explain)

        # Stopped (SIGTERM), lines written meanwhile, started again: all arrive, once.
        stop_agent(agent)
    append(files[two], 4)
    # Started first where raywatch cannot be reached, so its spool shows what it sends:
    # the four new lines, nothing it had sent before.
    unreachable = {**env, "RAYWATCH_URL": f"http://127.0.0.1:{free_port()}"}
    with running_agent(unreachable, agent_log):
        spooled = wait_for(lambda: spooled_results(env), 30, 0.2, "the new lines spooled",
                           explain)
    assert spooled == [(two, 1, it) for it in range(7, 11)]
    with running_agent(env, agent_log) as agent:
        wait_for(lambda: all_arrived(api, files), 30, 0.2, "lines written while it was down",
                 explain)
        append(files[three], 50)
        agent.send_signal(signal.SIGKILL)  # mid-poll, perhaps: at worst a poll is resent
        agent.wait()
    with running_agent(env, agent_log):
        wait_for(lambda: all_arrived(api, files), 30, 0.2, "lines after a SIGKILL", explain)
        append(files[one], 2)
        wait_for(lambda: all_arrived(api, files), 30, 0.2, "lines after the restarts", explain)
    assert {tid: rows for tid, (rows, _) in counts(files).items()} == {
        tid: written for tid, (_, written) in counts(files).items()}
    assert "Traceback" not in agent_log.read_text()


def test_one_directory_seen_by_two_nodes_is_stored_once(
        live_server_asgi: LiveServer, admin: User, logs: Path, tmp_path: Path) -> None:
    api = token_client(admin)
    files = result_files(logs)
    node_a = node(live_server_asgi.url, tmp_path, "gpu-a", logs)
    node_b = node(live_server_asgi.url, tmp_path, "gpu-b", logs)
    with running_agent(node_a, tmp_path / "a.log"), running_agent(node_b, tmp_path / "b.log"):
        wait_for(lambda: all_arrived(api, files), 60, 0.2, "every line")
        append(files[sorted(files)[0]], 5)
        wait_for(lambda: all_arrived(api, files), 30, 0.2, "every line")
        wait_for(lambda: not list((tmp_path / "gpu-b-spool").glob("*.batch.json"))
                 and not list((tmp_path / "gpu-a-spool").glob("*.batch.json")), 30, 0.2,
                 "both spools to drain")
    assert Experiment.objects.count() == 1
    assert sorted(Experiment.objects.get().paths) == [f"gpu-a:{logs / NAME}",
                                                      f"gpu-b:{logs / NAME}"]
    assert len(api.get(f"/api/trials/?experiment={NAME}").json()) == 3
    assert {tid: rows for tid, (rows, _) in counts(files).items()} == {
        tid: written for tid, (_, written) in counts(files).items()}


def trial_log(**changes: object) -> dict:
    record = {"kind": wire.TRIAL_LOG, "at": wire.timestamp(timezone.now()),
              "experiment": "hand", "experiment_dir": "/r/hand", "format": "tune",
              "trial_id": "abcde_00000", "trainable": "train", "directory": "/r/hand/t",
              "live": False, "problem_count": 0, "problems": [], "params": None,
              "error": None, "tune_status": None,
              "results": [{"attempt": 1, "iteration": 1, "at": None, "time_this_iter_s": 1.0,
                           "metrics": {"score": 1.0}, "pid": 7, "node_ip": None,
                           "hostname": None}]}
    return {**record, **changes}


MALFORMED = [
    trial_log(results=[{"attempt": 1, "iteration": "one", "metrics": {}}]),
    trial_log(results=[{"attempt": 0, "iteration": 1, "metrics": {}}]),
    trial_log(results=[{"attempt": 1, "iteration": 2**40, "metrics": {}}]),
    trial_log(results=[{"attempt": 1, "iteration": 1, "metrics": {"score": "high"}}]),
    trial_log(results=[{"attempt": 1, "iteration": 1, "metrics": [1]}]),
    trial_log(results=[{"attempt": 1, "iteration": 1, "metrics": {}, "at": "yesterday"}]),
    trial_log(results=None),
    trial_log(trial_id=""),
    trial_log(trial_id="x" * 5000),
    trial_log(format="csv"),
    trial_log(params=[1, 2]),
    trial_log(error={"text": 3}),
    trial_log(problems=[{"file": "result.json", "byte_offset": 1, "message": "bad"}]),
    trial_log(tune_status="R" * 40),
    trial_log(at=None),
]


@pytest.mark.parametrize("record", MALFORMED)
def test_a_malformed_trial_log_costs_only_itself(
        live_server_asgi: LiveServer, record: dict) -> None:
    """A trial_log record raywatch cannot read is refused alone (counted in `skipped`,
    and its trial's problem when it still names one): the batches sent with it, and the
    other records of its own batch, are stored (issue 43, M5)."""
    url, token = live_server_asgi.url, tokens.issue("gpu-a", None, timezone.now())[1]
    good = {"stream": "s1", "seq": 1, "at": record["at"] or "", "records": [trial_log()]}
    bad = {"stream": "s1", "seq": 2, "at": good["at"], "records": [record]}
    reply = call("POST", f"{url}/api/agent/v1/report", token,
                 {"version": 1, "agent": {}, "batches": [good, bad]})
    assert reply.status == 200 and reply.body["stored"] == [1, 2], reply.body
    assert reply.body["skipped"] == {"trial_log refused": 1}, reply.body
    assert list(StepResult.objects.values_list("trial__trial_id", "iteration")) == [
        ("abcde_00000", 1)]
    named = record.get("trial_id")
    if isinstance(named, str) and 0 < len(named) <= 255 and record.get("experiment_dir"):
        refused = Trial.objects.get(trial_id=named)
        assert "a record of it was refused: trial_log" in refused.last_parse_error


def test_an_agent_drops_a_refused_batch_and_sends_the_rest(
        live_server_asgi: LiveServer, admin: User, logs: Path, tmp_path: Path) -> None:
    """A batch raywatch can never store (here: planted in the spool) costs that batch
    only: the agent's real trial logs behind it all arrive."""
    api = token_client(admin)
    env = node(live_server_asgi.url, tmp_path, "gpu-a", logs)
    spool = Path(env["RAYWATCH_AGENT_SPOOL"])
    spool.mkdir()
    (spool / "state.json").write_text(json.dumps({"stream": "s" * 32, "next_seq": 2}))
    batch = {"stream": "s" * 32, "seq": 1, "at": wire.timestamp(timezone.now()),
             "records": [trial_log(), {"what": "a record of no kind"}]}  # never storable
    (spool / f"{1:012d}.batch.json").write_text(json.dumps(batch))
    with running_agent(env, tmp_path / "agent.log"):
        wait_for(lambda: all_arrived(api, result_files(logs)), 60, 0.2, "the trials' results")
    assert json.loads((spool / "state.json").read_text())["rejected"] == 1
    assert not Experiment.objects.filter(name="hand").exists()


PATHS = """
from dashboard.trials.models import Experiment
print(Experiment.objects.get(name="{name}").paths)
"""


def test_on_the_embedded_default_with_central_reading_off(  # type: ignore[no-untyped-def]
        logs: Path, tmp_path: Path, transactional_db) -> None:
    """`make run` (SQLite file, in-process scheduler) told not to read log dirs itself,
    though pointed at this one: the agent's lines arrive, once, across a SIGKILL of the
    agent; the status strip has nothing to say about log dirs. (The agent serve starts
    for this host may read the same dir, as the node it is: by its agent, never by
    raywatch's own reader.)"""
    env = embedded_env(tmp_path / "data", RAY_API_SERVER_ADDRESS=f"http://127.0.0.1:{free_port()}",
                       RAYWATCH_GPU_SOURCE="off", RAYWATCH_CENTRAL_LOGS="0",
                       RAYWATCH_LOG_DIRS=str(logs), RAYWATCH_POLL_LOGS_S="0.5")
    migrate(env)
    _, api_token, node_token = manage_all(env, ("ensure_admin",), ("drf_create_token", "admin"),
                                          ("agent_token", "gpu-a"))
    api_token, node_token = api_token.split()[2], node_token.strip()
    port, log = free_port(), tmp_path / "serve.log"
    url = f"http://127.0.0.1:{port}"
    agent = {**node(url, tmp_path, "gpu-a", logs), "RAYWATCH_AGENT_TOKEN": node_token}
    files = result_files(logs)

    def arrived() -> bool:
        try:
            ids = {t["trial_id"]: t["id"] for t in api_get(f"{url}/api/trials/", api_token)}
            return all(tid in ids and [
                (r["attempt"], r["iteration"], r["metrics"]["score"]) for r in
                api_get(f"{url}/api/trials/{ids[tid]}/results/", api_token)] == expected(p)
                for tid, p in files.items())
        except OSError:
            return False

    server = start_serve(env, port, log)
    try:
        with running_agent(agent, tmp_path / "agent.log") as process:
            wait_for(arrived, 120, 0.3, "the agent's trials", lambda: log.read_text()[-3000:])
            append(files[sorted(files)[0]], 3)
            process.send_signal(signal.SIGKILL)
            process.wait()
        with running_agent(agent, tmp_path / "agent.log"):
            wait_for(arrived, 60, 0.3, "the lines after a SIGKILL")
        sources = {s["source"]: s for s in api_get(f"{url}/api/sources/", api_token)}
    finally:
        stop_serve(server, log)
    assert sources["trial_logs"]["state"] == "healthy", sources["trial_logs"]
    paths = ast.literal_eval(manage(env, "shell", "-v", "0", "-c",
                                    PATHS.format(name=NAME)).strip())
    assert f"gpu-a:{logs / NAME}" in paths
    assert set(paths) <= {f"gpu-a:{logs / NAME}", f"{host_name()}:{logs / NAME}"}, paths
