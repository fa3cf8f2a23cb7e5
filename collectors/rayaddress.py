"""Turn what the operator gave (RAY_ADDRESS and friends) into a dashboard URL.

Ray accepts either the dashboard URL (http://head:8265, as the Jobs CLI does)
or the GCS address (head:6379); for the latter the dashboard's address is read
from the GCS key-value store, as Ray's own job client does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlparse

from collectors.http import SourceError


def dashboard_url(
    ray_address: str | None, api_server_address: str | None, local_file: Path | None
) -> str:
    if api_server_address:
        return api_server_address.rstrip("/")
    if ray_address:
        if "://" in ray_address:
            scheme = urlparse(ray_address).scheme
            if scheme not in ("http", "https"):
                raise SourceError(
                    f"RAY_ADDRESS={ray_address!r}: raywatch needs the dashboard URL "
                    "(http://HEAD:8265) or the GCS address (HEAD:PORT), not a ray:// client address"
                )
            return ray_address.rstrip("/")
        return _dashboard_from_gcs(ray_address)
    if local_file and local_file.exists():
        try:
            return json.loads(local_file.read_text())["dashboard_url"]
        except (ValueError, KeyError, OSError):
            raise SourceError(f"{local_file} is unreadable: restart `make run`") from None
    raise SourceError(
        "no Ray cluster configured: set RAY_ADDRESS (http://HEAD:8265 or HEAD:PORT), "
        "or start raywatch with `make run`, which starts a local cluster"
    )


def _dashboard_from_gcs(gcs_address: str) -> str:
    host, _, port = gcs_address.rpartition(":")
    if not host or not port.isdigit():
        raise SourceError(
            f"RAY_ADDRESS={gcs_address!r} is neither http://HEAD:8265 nor HEAD:PORT"
        )
    # Import here: only this form of the address needs Ray's GCS client.
    from ray._raylet import GcsClient

    # Token mode only where there is a token: a deployment that always names a token file
    # (docker compose's ray_auth_token secret) leaves it empty for a cluster without auth.
    if read_token(os.environ.get("RAY_AUTH_TOKEN"), os.environ.get("RAY_AUTH_TOKEN_PATH")):
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    try:
        client = GcsClient(address=gcs_address, cluster_id=None)
        value = client.internal_kv_get(b"dashboard", namespace=b"dashboard", timeout=5)
    except Exception as exc:
        raise SourceError(f"cannot reach the Ray GCS at {gcs_address}: {exc}") from None
    if not value:
        raise SourceError(f"the Ray GCS at {gcs_address} knows no dashboard: is it running?")
    return f"http://{value.decode()}"


def gcs_address(ray_address: str | None, gcs_setting: str | None,
                local_file: Path | None) -> str | None:
    """The GCS address (HOST:PORT) for the calls only the GCS answers (killing an
    unnamed actor), or None when raywatch was only given the dashboard URL."""
    if gcs_setting:
        return gcs_setting
    if ray_address and "://" not in ray_address:
        return ray_address
    if local_file and local_file.exists():
        try:
            return str(json.loads(local_file.read_text())["gcs_address"])
        except (ValueError, KeyError, OSError):
            return None
    return None


def read_token(token: str | None, token_path: str | None) -> str | None:
    """The token Ray's own clients would use: RAY_AUTH_TOKEN, else the token file."""
    if token:
        return token.strip()
    if token_path:
        path = Path(token_path).expanduser()
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SourceError(f"cannot read the Ray token file {path}: {exc.strerror}") from None
        return text or None
    return None
