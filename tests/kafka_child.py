"""A consumer process for the crash tests: ``python -m tests.kafka_child OUT`` with the settings
as JSON in ``$KAFKA_CHILD_SETTINGS``.

Its handler "stores durably" by appending each record's position to OUT (flush + fsync before
returning), then sleeps ``$KAFKA_CHILD_DELAY`` seconds per batch so a test can kill it mid-stream.
SIGTERM stops it gracefully.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time

from service.config import KafkaSettings
from service.records import LogRecord
from service.sources.kafka.factory import make_kafka_source


def main() -> int:
    out_path = sys.argv[1]
    settings = KafkaSettings(**json.loads(os.environ["KAFKA_CHILD_SETTINGS"]))
    delay = float(os.environ.get("KAFKA_CHILD_DELAY", "0"))
    logging.basicConfig(level=logging.WARNING)
    out = open(out_path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process

    def handler(records: list[LogRecord]) -> None:
        out.write("".join(f"{r.position}\n" for r in records))
        out.flush()
        os.fsync(out.fileno())
        if delay:
            time.sleep(delay)

    source = make_kafka_source(settings, handler, poll_timeout_s=0.2)
    signal.signal(signal.SIGTERM, lambda *_: source.stop(timeout=0))
    source.run()
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
