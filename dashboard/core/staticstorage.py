"""Static files named by their content and compressed, for WhiteNoise to serve.

`collectstatic` (make run and the image run it) writes each file under a name with
its hash and a gzip copy beside it; WhiteNoise then serves Plotly.js (1.2 MB) and
the rest compressed to browsers that accept it, with far-future cache headers (a new
content is a new name). Until collectstatic has run (tests, a fresh checkout), or once a
source file changed after it ran, pages name the plain files, which WhiteNoise serves
from the sources (uncompressed, cached briefly): never a stale copy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.staticfiles import finders
from whitenoise.storage import CompressedManifestStaticFilesStorage


class StaticStorage(CompressedManifestStaticFilesStorage):
    def load_manifest(self) -> tuple[dict[str, Any], str]:
        manifest = Path(self.path(self.manifest_name))
        if not manifest.exists() or newest_source() > manifest.stat().st_mtime:
            return {}, ""
        return super().load_manifest()

    def stored_name(self, name: str) -> str:
        try:
            return super().stored_name(name)
        except ValueError:  # not collected (yet, or not since it changed): the plain name
            return name


def newest_source() -> float:
    """When the newest static source file changed (modification time)."""
    times = [Path(storage.path(path)).stat().st_mtime
             for finder in finders.get_finders() for path, storage in finder.list([])]
    return max(times, default=0.0)
