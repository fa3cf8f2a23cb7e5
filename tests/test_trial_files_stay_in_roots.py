"""Files stay inside the log roots (issue 24). Whoever can write in a log root chooses
what is there, and the node agent runs as root with the host's pids. For raywatch's own
reader (`make run` reading RAYWATCH_LOG_DIRS) and for a real node agent reporting over
HTTP alike: a link out of the root (error.txt, params.json, result.json, a whole trial
dir) is not followed, and nothing behind it reaches the API or an incident; a FIFO does
not hang the poll; a file over its cap is refused; a poison file (JSON nested 900 deep,
a 50 MB line with no end, invalid UTF-8, lone surrogates) costs its own trial only.
Each refusal is that trial's problem, naming the file."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from dashboard.agents import tokens
from dashboard.incidents.models import Incident
from dashboard.trials.models import StepResult, Trial
from dashboard.trials.tasks import poll_trial_logs
from tests.agents import agent_env, running_agent
from tests.conftest import LiveServer, token_client, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
EXP = "hostile"
SECRET = "rw-secret-7f3a9"  # what lies outside the root
POLL_TIMEOUT_S = 30  # a poll of a few trials takes well under a second


def tid(n: int) -> str:
    return f"ab12c_{n:05d}"


def line(n: int, iteration: int, **extra: object) -> str:
    return json.dumps({"training_iteration": iteration, "trial_id": tid(n), "pid": 100 + n,
                       "timestamp": 1795280000 + iteration, "time_this_iter_s": 1.0,
                       "score": float(iteration), **extra}) + "\n"


def trial(root: Path, n: int, lines: int = 2, params: str = '{"lr": 0.1}') -> Path:
    """A Tune trial dir in the experiment: `lines` results and params.json."""
    path = root / EXP / f"train_{tid(n)}_{n}_lr=0.1_2026-11-21_16-30-01"
    path.mkdir(parents=True)
    (path / "result.json").write_text("".join(line(n, i) for i in range(1, lines + 1)))
    (path / "params.json").write_text(params)
    return path


def append(path: Path, n: int, start: int, count: int) -> None:
    with (path / "result.json").open("a") as out:
        out.writelines(line(n, i) for i in range(start, start + count))


# --- the two readers ------------------------------------------------------------------------
class Central:
    """raywatch's own reader: each poll is the Celery task, in a thread of its own so that a
    poll that hangs fails the test instead of hanging it."""

    def __init__(self, settings, root: Path) -> None:  # type: ignore[no-untyped-def]
        settings.CENTRAL_LOGS = True
        settings.LOG_DIRS = str(root).split(os.pathsep)
        self.root = root

    def until(self, done: Callable[[], object], what: str) -> None:
        for _ in range(4):
            self.poll()
            if done():
                return
        raise AssertionError(f"after 4 polls, still waiting for {what}; state: {seen()}")

    def poll(self) -> None:
        failure: list[BaseException] = []

        def run() -> None:
            try:
                poll_trial_logs()
            except BaseException as exc:
                failure.append(exc)
            finally:
                connection.close()

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        worker.join(POLL_TIMEOUT_S)
        if worker.is_alive():
            release_fifos(self.root)
            worker.join(POLL_TIMEOUT_S)
            raise AssertionError(f"a trial-log poll hung for {POLL_TIMEOUT_S} s")
        if failure:
            raise failure[0]


class Agent:
    """A node's agent (`python -m collectors.agent`) that alone reads the root."""

    def __init__(self, server: LiveServer, tmp_path: Path, root: Path, **env: str) -> None:
        self.token = tokens.issue("gpu-a", None, timezone.now())[1]
        self.env = agent_env(server.url, self.token, tmp_path, "gpu-a", "10.9.0.2", gpus=0,
                             RAYWATCH_LOG_DIRS=str(root), RAYWATCH_POLL_LOGS_S="0.3",
                             RAYWATCH_GPU_SOURCE="off", **env)
        self.log = tmp_path / "agent.log"

    def until(self, done: Callable[[], object], what: str) -> None:
        wait_for(done, 60, 0.3, what, lambda: f"{seen()}\n{self.log.read_text()[-3000:]}")
        poll_trial_logs()  # raywatch's detectors over what the agent sent (incidents)


@pytest.fixture(params=["central", "agent"])
def reader(request, settings, tmp_path: Path) -> Iterator[Callable[..., Central | Agent]]:  # type: ignore[no-untyped-def]
    """start(root, **caps): the reader under test, reading `root`."""
    def start(root: Path, **caps: int) -> Central | Agent:
        if request.param == "central":
            for name, value in caps.items():
                setattr(settings, name, value)
            return Central(settings, root)
        settings.CENTRAL_LOGS = False
        server = request.getfixturevalue("live_server_asgi")
        agent = Agent(server, tmp_path, root,
                      **{f"RAYWATCH_{k}": str(v) for k, v in caps.items()})
        started.append(running_agent(agent.env, agent.log))
        started[-1].__enter__()
        return agent

    started: list = []
    yield start
    for agent in started:
        agent.__exit__(None, None, None)


def release_fifos(root: Path) -> None:
    """Wake a reader stuck opening a FIFO (opened for writing, then closed: end of file)."""
    for path in root.rglob("*"):
        if stat.S_ISFIFO(path.lstat().st_mode):
            with contextlib.suppress(OSError):  # ENXIO: nobody waits on this one
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


# --- what an operator sees --------------------------------------------------------------------
def trials(api) -> dict[str, dict]:  # type: ignore[no-untyped-def]
    reply = api.get(f"/api/trials/?experiment={EXP}")
    return {t["trial_id"]: t for t in reply.json()} if reply.status_code == 200 else {}


def iterations(n: int) -> list[int]:
    """The trial's stored results (what its results API and chart show)."""
    return list(StepResult.objects.filter(trial__trial_id=tid(n)).order_by("iteration")
                .values_list("iteration", flat=True))


def problem(api, n: int) -> str:  # type: ignore[no-untyped-def]
    """The trial's problem as the trial page shows it (only when parse_errors > 0)."""
    found = trials(api).get(tid(n))
    return found["last_parse_error"] if found and found["parse_errors"] else ""


def seen() -> list[tuple]:
    return list(Trial.objects.order_by("trial_id").values_list(
        "trial_id", "iteration", "parse_errors", "last_parse_error"))


def everything_shown(api) -> str:  # type: ignore[no-untyped-def]
    """The trials, their results, the alerts and every incident, as text."""
    shown = [api.get(f"/api/trials/?experiment={EXP}").content.decode(),
             api.get("/api/alerts/").content.decode()]
    shown += [json.dumps(r.metrics) for r in StepResult.objects.all()]
    shown += [f"{i.summary} {json.dumps(i.details)}" for i in Incident.objects.all()]
    return "\n".join(shown)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """Files beside the root, as a hostile trainable would point at them."""
    place = tmp_path / "outside"
    place.mkdir()
    (place / "secret.txt").write_text(f"Failure # 1\nRuntimeError: {SECRET}\n")
    (place / "params.json").write_text(json.dumps({"stolen": SECRET}))
    (place / "result.json").write_text(line(3, 1, **{f"{SECRET}_score": 1.0}))
    elsewhere = place / "train_ab12c_00004_4_lr=0.1_2026-11-21_16-30-01"
    elsewhere.mkdir()
    (elsewhere / "result.json").write_text(line(4, 1, **{f"{SECRET}_loss": 2.0}))
    (elsewhere / "error.txt").write_text(f"Traceback\nValueError: {SECRET}\n")
    return place


# --- the tests ----------------------------------------------------------------------------------
def test_links_out_of_the_root_are_not_followed_and_each_is_its_trials_problem(
        reader, admin: User, tmp_path: Path, outside: Path) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "ray_results"
    trial(root, 0, lines=3)
    (trial(root, 1) / "error.txt").symlink_to(outside / "secret.txt")
    for n, name in ((2, "params.json"), (3, "result.json")):
        linked = trial(root, n) / name
        linked.unlink()
        linked.symlink_to(outside / name)
    (root / EXP / "train_ab12c_00004_4_lr=0.1_2026-11-21_16-30-01").symlink_to(
        outside / "train_ab12c_00004_4_lr=0.1_2026-11-21_16-30-01")
    # The reader's own environment: the agent's holds its node token.
    (trial(root, 5) / "error.txt").symlink_to("/proc/self/environ")
    api = token_client(admin)
    running = reader(root)

    expected = {1: "error.txt", 2: "params.json", 3: "result.json", 4: tid(4), 5: "error.txt"}
    running.until(lambda: iterations(0) == [1, 2, 3]
                  and all(problem(api, n) for n in expected), "the trials and their problems")
    for n, name in expected.items():
        assert name in problem(api, n) and "symbolic link" in problem(api, n), problem(api, n)
    shown = trials(api)
    assert shown[tid(0)]["config"] == {"lr": 0.1} and not shown[tid(0)]["parse_errors"]
    assert shown[tid(1)]["error_text"] == "" and shown[tid(1)]["status"] != "ERROR"
    assert shown[tid(2)]["config"] == {}
    assert iterations(3) == [] and iterations(1) == [1, 2]
    text = everything_shown(api)
    assert SECRET not in text
    assert "PATH=" not in text and "RAYWATCH_" not in text  # no environment, no token
    if isinstance(running, Agent):
        assert running.token not in text


def test_a_fifo_does_not_hang_the_poll(reader, admin: User, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "ray_results"
    healthy, piped = trial(root, 0), trial(root, 1)
    os.mkfifo(trial(root, 2) / "error.txt")  # a FIFO from the start
    api = token_client(admin)
    running = reader(root)
    running.until(lambda: iterations(0) == [1, 2] and iterations(1) == [1, 2],
                  "the first lines")

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    os.replace(fifo, piped / "result.json")  # result.json is now a FIFO nobody writes
    append(healthy, 0, 3, 2)
    running.until(lambda: iterations(0) == [1, 2, 3, 4]
                  and problem(api, 1) and problem(api, 2), "the lines after the FIFO")
    assert "result.json" in problem(api, 1) and "FIFO" in problem(api, 1)
    assert "error.txt" in problem(api, 2) and "FIFO" in problem(api, 2)
    assert iterations(1) == [1, 2]  # what was read before stays


def test_a_file_over_its_cap_is_refused_visibly(reader, admin: User, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "ray_results"
    trial(root, 0, lines=3)
    big = trial(root, 1, lines=0)
    with (big / "result.json").open("w") as out:  # 1.5 MB of good lines
        out.writelines(line(1, i, padding="x" * 500) for i in range(1, 3001))
    trial(root, 2, params=json.dumps({"lr": 0.1, "grid": ["x" * 100] * 15_000}))
    api = token_client(admin)
    running = reader(root, LOG_FILE_MAX_MB=1, LOG_JSON_FILE_MAX_MB=1)

    running.until(lambda: iterations(0) == [1, 2, 3] and problem(api, 1)
                  and problem(api, 2), "the trials and their problems")
    assert "result.json" in problem(api, 1) and "cap" in problem(api, 1), problem(api, 1)
    assert "params.json" in problem(api, 2) and "cap" in problem(api, 2), problem(api, 2)
    assert iterations(1) == [] and trials(api)[tid(2)]["config"] == {}
    assert iterations(2) == [1, 2]


def deep(levels: int) -> str:
    return '{"a": ' * levels + "1" + "}" * levels


def test_poison_files_cost_their_own_trial_only(reader, admin: User, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "ray_results"
    healthy = trial(root, 0)
    trial(root, 1, params=deep(900))  # nested past Python's recursion limit
    endless = trial(root, 2)
    with (endless / "result.json").open("ab") as out:
        out.write(b'{"training_iteration": 3, "blob": "' + b"x" * (50 << 20))  # no end
    mangled = trial(root, 3, params='{"lr": 0.1, "name": "\\ud800 alone"}')
    with (mangled / "result.json").open("ab") as out:
        out.write(b'{"training_iteration": 3, "score": "\xc3\x28"}\n')  # invalid UTF-8
        out.write(b'{"training_iteration": 4, "\\udc00loss": 0.5, "score": 4.0}\n')
    (mangled / "error.txt").write_bytes(b"Failure # 1\nValueError: bad \xff\xfe bytes\n")
    nested = trial(root, 4)
    with (nested / "result.json").open("a") as out:
        out.write(f'{{"training_iteration": 3, "trial_id": "{tid(4)}", "deep": {deep(900)}}}\n')
    api = token_client(admin)
    running = reader(root)

    running.until(lambda: iterations(0) == [1, 2] and iterations(4) == [1, 2, 3]
                  and all(problem(api, n) for n in (1, 2, 3)), "every trial")
    assert "params.json" in problem(api, 1) and "nested" in problem(api, 1), problem(api, 1)
    assert iterations(1) == [1, 2]  # its results are read all the same
    assert "result.json" in problem(api, 2) and "longer than" in problem(api, 2)
    assert iterations(2) == [1, 2]
    assert "UTF-8" in problem(api, 3) and iterations(3) == [1, 2, 4]
    shown = trials(api)
    assert shown[tid(0)]["config"] == {"lr": 0.1}
    assert shown[tid(3)]["config"]["lr"] == 0.1 and "alone" in shown[tid(3)]["config"]["name"]
    assert "ValueError: bad" in shown[tid(3)]["error_text"]

    append(healthy, 0, 3, 2)  # the reader goes on after them, poll after poll
    running.until(lambda: iterations(0) == [1, 2, 3, 4], "the healthy trial's new lines")


def test_a_hard_link_into_the_root_is_refused_visibly(  # type: ignore[no-untyped-def]
        reader, admin: User, tmp_path: Path, outside: Path) -> None:
    """A job can hard-link a file it may read (another user's, or one only raywatch's
    reader should see) into a root: no logger writes one, so it is not read."""
    root = tmp_path / "ray_results"
    trial(root, 0)
    os.link(outside / "secret.txt", trial(root, 1) / "error.txt")
    linked = trial(root, 2) / "params.json"
    linked.unlink()
    os.link(outside / "params.json", linked)
    api = token_client(admin)
    running = reader(root)

    running.until(lambda: iterations(0) == [1, 2] and problem(api, 1) and problem(api, 2),
                  "the trials and their problems")
    assert "error.txt" in problem(api, 1) and "hard links" in problem(api, 1), problem(api, 1)
    assert "params.json" in problem(api, 2) and "hard links" in problem(api, 2)
    assert trials(api)[tid(1)]["error_text"] == "" and iterations(1) == [1, 2]
    assert SECRET not in everything_shown(api)


@pytest.mark.skipif(os.geteuid() != 0, reason="files of another uid need root to make")
def test_a_root_linked_by_a_user_to_what_they_do_not_own_is_not_read(  # type: ignore[no-untyped-def]
        reader, admin: User, tmp_path: Path) -> None:
    """`~/ray_results` moved to a bigger disk and linked is read; a link that a user who
    can replace it points at a directory they do not own (the system's, another user's)
    is not, and says why."""
    moved = tmp_path / "big-disk" / "ray_results"  # root's own: the link below is root's
    trial(moved, 0)
    foreign = tmp_path / "system"  # root owns it; the link to it is uid 4321's
    trial(foreign, 1, params=json.dumps({"stolen": SECRET}))
    ours, theirs = tmp_path / "home" / "ray_results", tmp_path / "home2" / "ray_results"
    for link, target in ((ours, moved), (theirs, foreign)):
        link.parent.mkdir()
        link.symlink_to(target)
    os.lchown(theirs, 4321, 4321)
    api = token_client(admin)
    running = reader(Path(f"{ours}{os.pathsep}{theirs}"))

    running.until(lambda: iterations(0) == [1, 2], "the moved root's trial")
    assert tid(1) not in trials(api) and SECRET not in everything_shown(api)
    if isinstance(running, Agent):
        said = running.log.read_text()
        assert f"{theirs} is a symbolic link of uid 4321" in said, said[-2000:]
