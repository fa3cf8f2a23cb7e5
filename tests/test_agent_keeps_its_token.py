"""An agent's token is its own (issue 43, M4): a Ray worker runs under the agent's uid on
many nodes (KubeRay, a shared process namespace), and could read the token from the
agent's /proc/<pid>/environ. The agent makes itself non-dumpable at start (its /proc
files are then root's) and drops the token from the environment its children inherit.
Measured here with two processes of one ordinary uid (nobody), as on a node: before, the
reader gets the token; after the agent's keep_secrets(), it is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Both start as root (this venv is not nobody's to run) and become nobody at once; a
# uid change leaves a process non-dumpable (fs.suid_dumpable), so the "plain" agent is
# made dumpable again, as any process its uid started is.
AGENT = """
import ctypes, os, sys, time
from collectors.agent.main import PR_SET_DUMPABLE, keep_secrets
os.setgid(65534); os.setuid(65534)
ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
if sys.argv[1] == "keep":
    said = keep_secrets()
    assert said is None, said
    assert "RAYWATCH_AGENT_TOKEN" not in os.environ
print("ready", flush=True)
time.sleep(60)
"""
READER = """
import os, sys
os.setgid(65534); os.setuid(65534)
try:
    with open(f"/proc/{sys.argv[1]}/environ", "rb") as f:
        print("read", b"rwa_secret_of_the_node" in f.read())
except PermissionError:
    print("refused")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0,
                    reason="needs Linux and root, to run both processes as one other uid")
@pytest.mark.parametrize(("mode", "seen"), [("plain", "read True"), ("keep", "refused")])
def test_a_process_of_the_agents_uid_cannot_read_its_token(mode: str, seen: str) -> None:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), "HOME": "/tmp",
           "RAYWATCH_AGENT_TOKEN": "rwa_secret_of_the_node"}
    agent = subprocess.Popen([sys.executable, "-c", AGENT, mode], env=env, cwd="/tmp",
                             stdout=subprocess.PIPE, text=True)
    try:
        assert agent.stdout is not None and agent.stdout.readline() == "ready\n"
        reader = subprocess.run([sys.executable, "-c", READER, str(agent.pid)], cwd="/tmp",
                                env={"PATH": env["PATH"]}, capture_output=True, text=True,
                                timeout=60)
        assert reader.stdout.strip() == seen, (reader.stdout, reader.stderr)
    finally:
        agent.kill()
        agent.wait()
