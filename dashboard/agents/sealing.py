"""Node tokens' command keys, sealed. raywatch signs an agent's commands with a key the
agent derives from its token (wire.command_key); raywatch derives it once, when it
issues the token (it never sees the token again), and keeps it encrypted with a key
from its settings (RAYWATCH_AGENT_COMMAND_SECRET, else RAYWATCH_SECRET_KEY). So a copy
of the database alone (a backup, a read-only role, an injected SELECT) signs nothing:
it holds the token's hash and this sealed key, and neither gives the key.

Fernet (AES-128-CBC + HMAC-SHA256) from `cryptography`, which Ray already installs."""

from __future__ import annotations

import base64
import hashlib
import hmac
from functools import cache

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

VERSION = "v1:"  # what a sealed key starts with; "" (a token issued before): none


@cache
def _fernet(secret: str) -> Fernet:
    derived = hmac.new(secret.encode(), b"raywatch-agent-command-keys-v1", hashlib.sha256)
    return Fernet(base64.urlsafe_b64encode(derived.digest()))


def seal(key: str) -> str:
    return VERSION + _fernet(settings.AGENT_COMMAND_SECRET).encrypt(key.encode()).decode()


def unseal(sealed: str) -> str | None:
    """The command key; None for a token issued before command keys, or one sealed with
    another secret (the setting changed): raywatch can sign nothing for it."""
    if not sealed.startswith(VERSION):
        return None
    try:
        return _fernet(settings.AGENT_COMMAND_SECRET).decrypt(
            sealed.removeprefix(VERSION).encode()).decode()
    except (InvalidToken, ValueError):
        return None
