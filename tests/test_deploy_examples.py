"""The deploy examples say what docs/agents.md and docs/deploying.md promise. The
agent's (KubeRay sidecar, systemd unit, docker-compose's agent service) get raywatch's
URL and a node token and no database or broker credentials, read the Ray temp dir
read-only, keep a spool, and hold no privilege but ptrace. docker-compose runs nothing
as root, keeps Postgres and Redis out of the agent's reach and behind passwords nobody
left at a default, and serves raywatch only through TLS. The images and `make install`
take the locked packages, each by hash."""

from __future__ import annotations

import configparser
import re
import tomllib
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from tests.deploy import (
    ROOT,
    Unset,
    compose,
    dockerfile_stages,
    lock,
    networks_of,
    pins,
    resolved,
)

CREDENTIALS = ("DATABASE_URL", "REDIS_URL", "RAY_AUTH_TOKEN", "RAYWATCH_SECRET_KEY")
# What an operator must give; the rest of the file resolves from its defaults.
REQUIRED = {"RAYWATCH_HOST": "raywatch.example.org", "RAY_ADDRESS": "http://head:8265",
            "HOME": "/home/ray"}


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
        security = agent["securityContext"]
        assert security["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE"]}
        assert security["runAsNonRoot"] is True and security["runAsUser"] != 0
        assert security["readOnlyRootFilesystem"] is True
        assert agent["image"].rsplit(":", 1)[0].endswith("/raywatch-agent")  # the slim one
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
    assert service["User"] not in ("root", "0")
    assert service["CapabilityBoundingSet"] == service["AmbientCapabilities"] == "CAP_SYS_PTRACE"
    assert service["NoNewPrivileges"] == "yes" and service["ProtectSystem"] == "strict"
    assert not any(name in (ROOT / "docs" / "raywatch-agent.service").read_text()
                   for name in CREDENTIALS)


def test_the_compose_agent_gets_a_url_and_token_host_pids_and_ray_dirs_read_only() -> None:
    agent = resolved(compose(), REQUIRED)["services"]["agent"]
    assert agent["command"] == ["python", "-m", "collectors.agent"]
    env = agent["environment"]
    assert env["RAYWATCH_URL"] == "https://raywatch.example.org"  # through the TLS proxy
    assert env["RAYWATCH_AGENT_TOKEN_FILE"] == "/run/secrets/agent_token"
    assert agent["secrets"] == ["agent_token"]
    assert not set(env) & {*CREDENTIALS, "RAYWATCH_AGENT_TOKEN"}
    assert agent["pid"] == "host"
    assert agent["build"]["target"] == "agent"
    assert agent["read_only"] is True
    mounts = dict(mount(v) for v in agent["volumes"])
    assert mounts["/tmp/ray"] == mounts["/ray_results"] == "ro"
    assert [where for where, mode in mounts.items() if mode == "rw"] == [
        env["RAYWATCH_AGENT_SPOOL"]]


def test_the_compose_agent_cannot_reach_postgres_or_redis() -> None:
    doc = compose()
    services = doc["services"]
    agent = networks_of(services["agent"])
    assert not any("network_mode" in service for service in services.values())
    for name in ("postgres", "redis"):
        database = networks_of(services[name])
        assert not database & agent, name
        assert all(doc["networks"][net]["internal"] is True for net in database), name
    # Every network the agent shares is one no raywatch process, database or proxy is on.
    assert [name for name, s in services.items() if networks_of(s) & agent] == ["agent"]


def test_no_compose_service_runs_as_root_or_keeps_a_capability_it_does_not_need() -> None:
    services = resolved(compose(), REQUIRED)["services"]
    added = {"agent": ["SYS_PTRACE"], "proxy": ["NET_BIND_SERVICE"]}
    for name, service in services.items():
        assert service.get("user", "root").split(":")[0] not in ("root", "0"), name
        assert service["cap_drop"] == ["ALL"], name
        assert service.get("cap_add", []) == added.get(name, []), name
        assert not service.get("privileged"), name
        if name != "agent":  # py-spy's file capability: see the compose file
            assert "no-new-privileges:true" in service["security_opt"], name
    for stage, instructions in dockerfile_stages().items():
        if stage != "base":  # the images: both stages a service builds
            [user] = [args for op, args in instructions if op == "USER"][-1:]
            assert user.split(":")[0] not in ("root", "0"), stage


def test_compose_has_no_default_password_and_reads_each_from_a_secret_file() -> None:
    doc = compose()
    with pytest.raises(Unset):  # refuses to start without what is not in a file
        resolved(doc, {})
    services = resolved(doc, REQUIRED)["services"]
    assert all(spec.keys() == {"file"} for spec in doc["secrets"].values())
    for name, service in services.items():
        env = service.get("environment", {})
        for variable, value in env.items():
            if variable.endswith(("_FILE", "_PATH")) and value.startswith("/run/secrets/"):
                secret = value.removeprefix("/run/secrets/")
                assert secret in service["secrets"] and secret in doc["secrets"], variable
            elif any(word in variable for word in ("PASSWORD", "SECRET", "TOKEN")):
                assert value == "", f"{name}: {variable} has a default"
        for url in (env.get("DATABASE_URL"), env.get("REDIS_URL")):
            assert url is None or urlparse(url).password is None, name
    raywatch = services["web"]["environment"]
    assert raywatch["RAYWATCH_DATABASE_PASSWORD_FILE"] == "/run/secrets/postgres_password"
    assert raywatch["RAYWATCH_REDIS_PASSWORD_FILE"] == "/run/secrets/redis_password"
    postgres = services["postgres"]["environment"]
    assert postgres["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres_password"
    assert not {"POSTGRES_PASSWORD", "POSTGRES_HOST_AUTH_METHOD"} & set(postgres)
    redis = " ".join(services["redis"]["command"])
    assert 'requirepass "$(cat /run/secrets/redis_password)"' in redis
    assert "test -s /run/secrets/redis_password" in redis  # an empty file stops it


def test_raywatch_is_served_only_through_the_tls_proxy() -> None:
    doc = resolved(compose(), REQUIRED)
    services = doc["services"]
    assert {name: s["ports"] for name, s in services.items() if "ports" in s} == {
        "proxy": ["443:8443"]}
    caddyfile = doc["configs"]["caddyfile"]["content"]
    assert "raywatch.example.org {" in caddyfile and "https_port 8443" in caddyfile
    assert "tls /run/secrets/tls_cert /run/secrets/tls_key" in caddyfile
    assert "reverse_proxy web:8000" in caddyfile
    env = services["web"]["environment"]
    assert env["RAYWATCH_SECURE_COOKIES"] == "1" and "RAYWATCH_SSL_REDIRECT" not in env
    assert env["RAYWATCH_CSRF_TRUSTED_ORIGINS"] == "https://raywatch.example.org"
    # The proxy reaches web over `edge` alone, the one subnet whose forwarded headers
    # raywatch believes; nothing else is on it.
    assert networks_of(services["proxy"]) & networks_of(services["web"]) == {"edge"}
    assert [n for n, s in services.items() if "edge" in networks_of(s)] == ["web", "proxy"]
    [edge] = doc["networks"]["edge"]["ipam"]["config"]
    assert env["RAYWATCH_TRUSTED_PROXIES"] == edge["subnet"]
    # The web container sees none of its host's GPUs or processes: the host's node agent
    # is the `agent` service, so web starts none of its own (nor does the image).
    assert services["web"]["command"][-2:] == ["--no-celery", "--no-agent"]
    assert '"--no-celery", "--no-agent"]' in (ROOT / "Dockerfile").read_text()


def test_the_images_install_only_locked_packages_by_hash() -> None:
    stages = dockerfile_stages()
    for stage, lockfile in (("server", "server"), ("agent", "agent")):
        installs = [args for op, args in stages[stage] if op == "RUN" and "pip install" in args]
        assert installs == [f"pip install --require-hashes --no-deps -r "
                            f"requirements/{lockfile}.lock"], stage
        for op, args in stages[stage]:
            if op == "COPY":
                *sources, _ = [a for a in args.split() if not a.startswith("--")]
                assert all((ROOT / source).exists() for source in sources), args
    copied = " ".join(args for op, args in stages["agent"] if op == "COPY")
    assert "dashboard" not in copied and "server.lock" not in copied
    assert list(stages)[-1] == "server"  # what a plain `docker build .` gives
    services = compose()["services"]
    built = {name: s["build"] for name, s in services.items() if "build" in s}
    assert {name for name, b in built.items() if b != "."} == {"agent"}


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
    assert "docs/deploying.md" in readme


def test_compose_keeps_credentials_out_of_env_and_logs_and_bounds_every_service() -> None:
    """issue 43, L9: Ray's token and the first admin's password are secret files (not in
    an environment `docker inspect` shows, nor printed to `docker compose logs`); every
    image is pinned to a release; every service has memory, CPU and process limits; and
    raywatch's own containers run read-only with their scratch in memory."""
    doc = compose()
    services = resolved(doc, REQUIRED)["services"]
    for name, service in services.items():
        env = service.get("environment", {})
        assert "RAY_AUTH_TOKEN" not in env, name
        command = " ".join(service.get("command", []) if isinstance(
            service.get("command"), list) else [service.get("command") or ""])
        assert "RAY_AUTH_TOKEN=" not in command and "--password " not in command, name
        assert {"mem_limit", "cpus", "pids_limit"} <= service.keys(), name
        if "image" in service:
            tag = service["image"].partition(":")[2]
            assert re.match(r"\d+\.\d+", tag) or "@sha256:" in service["image"], (name, tag)
    raywatch = [n for n, s in services.items() if s.get("build") == "."]
    assert {"web", "worker", "notifier", "stacks", "beat", "migrate"} <= set(raywatch)
    for name in raywatch:
        service = services[name]
        assert service["read_only"] is True, name
        assert any(t.startswith("/tmp") for t in service["tmpfs"]), name
        # The image's collected static files live in /var/lib/raywatch: never hidden.
        assert not any(t.startswith("/var/lib/raywatch") for t in service["tmpfs"]), name
        assert service["environment"]["RAY_AUTH_TOKEN_PATH"] == "/run/secrets/ray_auth_token"
        assert "ray_auth_token" in service["secrets"], name
    migrate = " ".join(services["migrate"]["command"])
    assert "ensure_admin --password-file /run/secrets/admin_password" in migrate
    assert "admin_password" in services["migrate"]["secrets"]
    assert {"ray_auth_token", "admin_password"} <= doc["secrets"].keys()
