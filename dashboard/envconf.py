"""Tiny helpers that read settings from the environment and fail loudly.

Only dashboard/settings.py calls these. Each one names the variable in its
error so that a malformed value stops raywatch at start with a message an
operator can act on, never a traceback deep inside a request.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from urllib.parse import quote, urlparse, urlsplit, urlunsplit

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class ConfigError(Exception):
    """A setting from the environment is malformed."""


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value is None or value.strip() == "" else value.strip()


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean: use 1/0, true/false, yes/no or on/off")


def env_choice(name: str, choices: tuple[str, ...], default: str) -> str:
    value = (os.environ.get(name) or "").strip().lower() or default
    if value not in choices:
        raise ConfigError(f"{name}={value!r}: choose one of {', '.join(choices)}")
    return value


def env_number(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ConfigError(f"{name}={raw!r} must be a finite number")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}={raw!r} must be at least {minimum:g}")
    return value


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a whole number") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}={raw!r} must be at least {minimum}")
    return value


def env_list(name: str, default: list[str], sep: str = ",") -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return list(default)
    return [item.strip() for item in raw.split(sep) if item.strip()]


def env_networks(name: str, default: list[str]) -> tuple[IPNetwork, ...]:
    """Comma-separated addresses or CIDR networks (`10.0.0.0/8`, `::1`)."""
    networks = []
    for item in env_list(name, default):
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ConfigError(f"{name}: {item!r} is not an address or network "
                              "(e.g. 10.0.0.0/8, 192.168.1.7, ::1)") from None
    return tuple(networks)


def env_secret(name: str) -> str | None:
    """NAME, or the contents of the file named by NAME_FILE (Docker secrets)."""
    value = env_str(name)
    path = env_str(f"{name}_FILE")
    if value and path:
        raise ConfigError(f"set {name} or {name}_FILE, not both")
    if path:
        try:
            value = Path(path).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"{name}_FILE={path!r} cannot be read: {exc.strerror}") from None
        if not value:
            raise ConfigError(f"{name}_FILE={path!r} is empty")
    return value


def env_url(name: str, schemes: tuple[str, ...]) -> str | None:
    """A URL whose scheme is one of `schemes` and which names a host (or a path for sqlite)."""
    value = env_str(name)
    if value is None:
        return None
    parsed = urlparse(value)
    if parsed.scheme not in schemes:
        allowed = ", ".join(f"{s}://" for s in schemes)
        raise ConfigError(f"{name}={_redact(value)!r} must start with one of: {allowed}")
    if parsed.scheme != "sqlite" and not parsed.hostname:
        raise ConfigError(f"{name}={_redact(value)!r} names no host")
    try:
        parsed.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise ConfigError(f"{name}={_redact(value)!r} has a malformed port") from None
    return value


def env_url_with_password(name: str, schemes: tuple[str, ...], password_name: str
                          ) -> str | None:
    """env_url(name), with the password `password_name` (or its _FILE, a Docker secret)
    put in: the URL itself then holds no secret to leak through the environment."""
    url, password = env_url(name, schemes), env_secret(password_name)
    if url is None or password is None:
        if password is not None:
            raise ConfigError(f"{password_name} is set but {name} is not")
        return url
    parts = urlsplit(url)
    if not parts.hostname:
        raise ConfigError(f"{password_name}: {name} names no host to log in to")
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:{quote(password, safe='')}@{host}"))


def _redact(url: str) -> str:
    parsed = urlparse(url)
    if parsed.password:
        return url.replace(f":{parsed.password}@", ":***@")
    return url
