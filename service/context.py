"""What the running service's parts share: settings, store, pipeline, classifier parts."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from service.config import Settings


@dataclass
class ServiceContext:
    settings: Settings
    store: Any  # service.store.Store
    pipeline: Any  # service.pipeline.Pipeline
    rulebook: Any  # service.classify.rulebook.RuleBook (shared, read-only)
    text_model: Any | None  # service.classify.text_model.TextModel (shared, read-only)
    started_at: float = field(default_factory=time.time)
    ready: bool = False
    instance_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    extra: dict[str, Any] = field(default_factory=dict)  # sources, dispatcher ... for health
