"""One call of Ray's internal gRPC API (the GCS's, a raylet's), for the few things Ray
offers no public call for: ending an unnamed actor (raykill.py), which GPU a worker
holds (raygpus.py). Internal API: Ray is pinned with == for it (docs/ray-facts.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from collectors.http import SourceError


def call(address: str, stub: Callable[[Any], Any], method: str, request: Any,
         token: str | None, timeout_s: float, failure: str) -> Any:
    """`stub(channel).method(request)` on a channel of its own, with Ray's token; a
    refusal or an unreachable address is SourceError("<failure>: CODE: details")."""
    import grpc

    channel = grpc.insecure_channel(address)
    try:
        metadata = [("authorization", f"Bearer {token}")] if token else None
        return getattr(stub(channel), method)(request, metadata=metadata, timeout=timeout_s)
    except grpc.RpcError as exc:
        raise SourceError(f"{failure}: {exc.code().name}: {exc.details()}") from None
    finally:
        channel.close()
