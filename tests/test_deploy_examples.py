"""The agent's deploy examples say what the README promises: the KubeRay sidecar, the
systemd unit and docker-compose's agent service get raywatch's URL and a node token and
no database or broker credentials, read the Ray temp dir read-only, and keep a spool.
`make install` and `make agent` take the locked packages, each by hash."""

from __future__ import annotations

import configparser
import tomllib
from typing import Any

import yaml

from tests.deploy import ROOT, lock, pins

CREDENTIALS = ("DATABASE_URL", "REDIS_URL", "RAY_AUTH_TOKEN", "RAYWATCH_SECRET_KEY")


def agent_container(pod: dict[str, Any]) -> dict[str, Any]:
    [agent] = [c for c in pod["containers"] if "collectors.agent" in c.get("command", [])]
    return agent


def test_the_kuberay_sidecar_shares_the_ray_temp_dir_and_holds_only_its_token() -> None:
    cluster = yaml.safe_load((ROOT / "docs" / "kuberay-agent.yaml").read_text())
    assert cluster["kind"] == "RayCluster"
    pods = [cluster["spec"]["headGroupSpec"]["template"]["spec"],
            *[g["template"]["spec"] for g in cluster["spec"]["workerGroupSpecs"]]]
    assert len(pods) >= 2
    for pod in pods:
        assert pod["shareProcessNamespace"] is True and not pod.get("hostPID")
        agent = agent_container(pod)
        [ray] = [c for c in pod["containers"] if c is not agent]
        ray_tmp = {m["name"] for m in ray["volumeMounts"] if m["mountPath"] == "/tmp/ray"}
        shared = [m for m in agent["volumeMounts"] if m["name"] in ray_tmp]
        assert [(m["mountPath"], m.get("readOnly")) for m in shared] == [("/tmp/ray", True)]
        assert ray_tmp <= {v["name"] for v in pod["volumes"]}

        env = {e["name"]: e for e in agent["env"]}
        assert not set(env) & set(CREDENTIALS)
        assert env["RAYWATCH_URL"]["value"].startswith("https://")
        assert "secretKeyRef" in env["RAYWATCH_AGENT_TOKEN"]["valueFrom"]  # never inline
        assert "SYS_PTRACE" in agent["securityContext"]["capabilities"]["add"]
        spool = env["RAYWATCH_AGENT_SPOOL"]["value"]
        assert spool in {m["mountPath"] for m in agent["volumeMounts"]}
    secrets = {e["valueFrom"]["secretKeyRef"]["name"] for p in pods
               for e in agent_container(p)["env"] if e["name"] == "RAYWATCH_AGENT_TOKEN"}
    assert len(secrets) == len(pods)  # a token per node


def test_the_systemd_unit_restarts_the_agent_with_its_env_file_and_spool() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(ROOT / "docs" / "raywatch-agent.service")
    service = unit["Service"]
    assert service["ExecStart"].endswith("python -m collectors.agent")
    assert service["Restart"] == "always" and service["EnvironmentFile"]
    assert service["Environment"] == "RAYWATCH_AGENT_SPOOL=/var/lib/raywatch-agent"
    assert service["StateDirectory"] == "raywatch-agent"
    assert "PrivateTmp" not in service  # it reads Ray's /tmp/ray
    assert not any(name in (ROOT / "docs" / "raywatch-agent.service").read_text()
                   for name in CREDENTIALS)


def test_the_compose_agent_gets_a_url_and_token_host_pids_and_ray_dirs_read_only() -> None:
    agent = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["agent"]
    assert agent["command"] == ["python", "-m", "collectors.agent"]
    assert {"RAYWATCH_URL", "RAYWATCH_AGENT_TOKEN"} <= set(agent["environment"])
    assert not set(agent["environment"]) & set(CREDENTIALS)
    assert agent["pid"] == "host"
    mounts = dict(mount(v) for v in agent["volumes"])
    assert mounts["/tmp/ray"] == mounts["/ray_results"] == "ro"
    assert mounts[agent["environment"]["RAYWATCH_AGENT_SPOOL"]] == "rw"


def test_locks_hash_every_package_agree_with_pyproject_and_feed_make_install() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    server, dev, agent = lock("server"), lock("dev"), lock("agent")
    for locked in (server, dev, agent):
        assert all(hashes for _, hashes in locked.values())
    version = {name: v for name, (v, _) in server.items()}
    assert pins(project["dependencies"]).items() <= version.items()
    dev_version = {name: v for name, (v, _) in dev.items()}
    assert pins(project["optional-dependencies"]["dev"]).items() <= dev_version.items()
    assert server.items() <= dev.items()  # an image runs what the tests ran
    wanted = pins((ROOT / "agent-requirements.txt").read_text().splitlines())
    assert {name: v for name, (v, _) in agent.items()} == wanted
    assert agent.items() <= server.items()
    makefile = " ".join((ROOT / "Makefile").read_text().replace("\\\n", " ").split())
    for lockfile in ("dev", "agent"):  # make install, make agent: the same
        assert f"--require-hashes --no-deps -r requirements/{lockfile}.lock" in makefile


def mount(volume: str) -> tuple[str, str]:
    """(where, ro/rw) of a compose short-syntax volume, whose source may hold ${X:-a:b}."""
    *_, where, mode = volume.rsplit(":", 2)
    return (where, mode) if mode in ("ro", "rw") else (mode, "rw")


def test_the_readme_points_at_the_examples() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "docs/kuberay-agent.yaml" in readme and "docs/raywatch-agent.service" in readme
