"""What a source is, and what it hands its records to.

A source (one per transport: :mod:`~service.sources.kafka`, :mod:`~service.sources.forward`,
:mod:`~service.sources.http`) turns what a collector sends into
:class:`~service.records.LogRecord` s and hands them to the :class:`Sink` it is given; it knows
nothing else of the service and never imports the pipeline, the store, the API or the app.
The service's sink is its :class:`~service.pipeline.Pipeline`; tests pass their own.

The sink's contract, which each source's delivery guarantee rests on:

* ``await submit(records, source, chunk_id=None)`` (from the event loop: Forward, HTTP)
  returns once the batch is stored durably - the source acknowledges only then - and returns
  False when ``chunk_id`` was stored before (a client resent a chunk whose ack it lost:
  acknowledge again, nothing is applied twice). It raises when it could not store the
  batch: the source does not acknowledge, and the client sends it again.
* ``process(records, source)`` (from a source's own thread: Kafka) returns once the batch
  is stored; when it raises, the source commits nothing and reads the batch again.

A sink that keeps state per source partition also takes that source's rebalance hooks
(Kafka: :class:`~service.sources.kafka.rebalance.RebalanceSink`).

Every source offers the same lifecycle (:class:`Source`): it is built from its settings,
whose problems it reports as a :class:`SourceSettingsError`, and not started; ``await
start(sink)`` starts handing records to ``sink``; ``await stop()`` finishes (what it holds
unfinished is handed over first); ``health()`` says whether it runs and what it holds. Where
it runs differs behind that: the Forward server listens on the service's event loop, the
Kafka consumer runs on its own thread, the HTTP sources answer the API's requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from service.records import LogRecord


class Sink(Protocol):
    """Where a source hands its records (see the module docstring for the contract)."""

    async def submit(
        self, records: list[LogRecord], source: str, chunk_id: str | None = None
    ) -> bool: ...

    def process(self, records: list[LogRecord], source: str) -> None: ...


class SourceSettingsError(ValueError):
    """A source's settings cannot be used; ``problems`` holds one line per problem, each
    naming the setting (the app reports them as a configuration error)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class SourceHealth:
    """One source's state for a status page or a readiness check."""

    source: str
    running: bool
    # what the source can tell: partitions owned, open connections, lines held unfinished
    detail: Mapping[str, Any] = field(default_factory=dict)


class Source(Protocol):
    """What every source offers, whatever its transport (see the module docstring)."""

    source: str

    async def start(self, sink: Sink) -> None: ...

    async def stop(self) -> None: ...

    def health(self) -> SourceHealth: ...
