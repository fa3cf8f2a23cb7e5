"""An actor id comes from Ray's answers, which are data: one Ray could not have given
is refused with a clear SourceError (which the executor audits as the step's failure)
before the GCS is asked, for an actor's state as for killing it."""

from __future__ import annotations

import pytest

from collectors.http import SourceError
from collectors.raykill import GcsActor

NOWHERE = "127.0.0.1:9"  # a GCS asked would fail otherwise: "cannot reach"


@pytest.mark.parametrize("actor_id", ["zz", "a" * 31, "a" * 30, "'; rm -rf /", "", "ab" * 100])
def test_a_malformed_actor_id_is_refused_before_the_gcs_is_asked(actor_id: str) -> None:
    actor = GcsActor(NOWHERE, None, actor_id)
    for ask in (actor.state, lambda: actor.kill(True)):
        with pytest.raises(SourceError, match=r"^not an actor id"):
            ask()


def test_a_well_formed_id_is_asked_of_the_gcs() -> None:
    with pytest.raises(SourceError, match=r"cannot reach the Ray GCS at 127\.0\.0\.1:9"):
        GcsActor(NOWHERE, None, "1df58aafa32a0e9c5d49157002000000").state()
