"""What the running service's parts share: settings, store, pipeline, classifier parts, the
sources (for readiness) and what readiness noticed."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field

from service.classify.rulebook import RuleBook
from service.classify.text_model import TextModel
from service.config import Settings
from service.pipeline import Pipeline
from service.sources.base import Source
from service.store import Store


@dataclass
class ServiceContext:
    settings: Settings
    store: Store | None  # None: the API answers 503 where it needs one
    pipeline: Pipeline | None  # None: the same
    rulebook: RuleBook  # shared, read-only
    text_model: TextModel | None  # shared, read-only; None: signatures only
    started_at: float = field(default_factory=time.time)
    ready: bool = False
    instance_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    # every source (HTTP, Forward, Kafka): the API's ingest routes find their endpoint here,
    # readiness their health
    sources: tuple[Source, ...] = ()
    # when readiness last found the database empty and gave it the schema again
    schema_recreated_at: float | None = None
