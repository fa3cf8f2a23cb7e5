"""`python -m dashboard.core.beat SCHEDULE_FILE`: Celery beat as `manage.py serve` runs it,
stopped between two ticks.

Celery's own beat turns SIGTERM into SystemExit wherever the signal lands, in the middle
of sending a task to Redis too, and logs the broken send as a traceback on every such
stop (test_many_clusters[production] caught one). Here a stop only asks the scheduler
loop to end: it finishes the tick it is in, saves its schedule and exits.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

from celery import beat
from celery.apps.beat import Beat

from dashboard.celery import app


class BeatStoppedBetweenTicks(Beat):
    def install_sync_handler(self, service: beat.Service) -> None:
        def stop(signum: int, frame: FrameType | None) -> None:
            service.stop()  # the loop ends after this tick; its `finally` saves the schedule

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)


def main(argv: list[str]) -> None:
    BeatStoppedBetweenTicks(app=app, schedule=argv[0], loglevel="WARNING", quiet=True).run()


if __name__ == "__main__":
    main(sys.argv[1:])
