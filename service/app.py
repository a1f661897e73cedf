"""``vllm-sentinel serve``: wire the parts together and run them until SIGTERM/SIGINT.

One process: the FastAPI API (uvicorn) and the Fluentd forward server share an asyncio
loop; the Kafka consumer, the notification dispatcher and the stall ticker run on threads.
Kafka and the database are the distributed engine: several instances in one consumer group
share PostgreSQL, nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import uvicorn
from fastapi import FastAPI

from service import ratelog, ui
from service.api.app import create_app
from service.api.connections import (
    RESERVED_FDS,
    ConnectionGuard,
    descriptor_room,
    guarded_protocol,
)
from service.classify.engine import Classifier
from service.classify.judgements import fleet
from service.classify.loader import load_text_model
from service.classify.novelty import NoveltyDetector
from service.classify.rulebook import RuleBook
from service.classify.ruletest import RuleLoadError, load_rule_set
from service.config import Settings, SourcesSettings
from service.configcheck import ConfigError, link_warnings, load_checked, serve_problems
from service.context import ServiceContext
from service.netguard import check_auth_config, check_forward_config
from service.notify.dispatcher import Dispatcher
from service.pipeline import Pipeline
from service.ratelog import loop_exception_handler
from service.sources.base import Source, SourceSettingsError
from service.sources.forward.factory import forward_source
from service.sources.http.endpoint import http_sources
from service.sources.kafka.factory import kafka_source
from service.store import Store
from service.store.identity import default_instance_id

log = logging.getLogger("vllm_sentinel")

# The sources: each entry builds those its settings turn on (not started). They start in
# this order once the pipeline is up, and stop in it when the API has stopped.
SOURCES: tuple[Callable[[SourcesSettings], Iterable[Source | None]], ...] = (
    lambda s: http_sources(s.http),  # POST /ingest, POST /v1/logs: the API's routes
    lambda s: [forward_source(s.forward)],  # on the event loop
    lambda s: [kafka_source(s.kafka)],  # on a thread of its own
)


class _Server(uvicorn.Server):
    """uvicorn's server, minus the signal re-raise.

    After a graceful exit uvicorn (>= 0.29) restores the previous SIGTERM/SIGINT handlers and
    raises the captured signal again: with the default SIGTERM handler that kills the process
    (exit 143) before :func:`run` stops the Kafka consumer (final commit, leaving the group),
    flushes the forward server, stops the dispatcher and closes the store. Here the handlers
    stay ours until the process ends, so ``serve`` finishes the shutdown and returns 0.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, self.handle_exit)
        yield


@dataclass
class Service:
    """The running parts of one instance."""

    ctx: ServiceContext
    store: Store
    pipeline: Pipeline
    dispatcher: Dispatcher
    _stop: threading.Event = field(default_factory=threading.Event)
    _ticker: threading.Thread | None = None

    def start_threads(self) -> None:
        self.dispatcher.start()
        st = self.ctx.settings.stall
        if st.enabled:
            self._ticker = threading.Thread(
                target=self._tick_loop,
                args=(st.check_interval_s,),
                name="stall-ticker",
                daemon=True,
            )
            self._ticker.start()

    def _tick_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.pipeline.tick(time.time())
            except Exception:  # noqa: BLE001 - the ticker must survive a store hiccup
                log.exception("stall check failed; retrying at the next tick")

    def stop_threads(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(5)
        self.pipeline.close()
        self.dispatcher.stop()
        self.store.close()


def build(settings: Settings) -> Service:
    """Create every part from the settings (migrates the store first)."""
    st = settings.store
    store = Store(
        st.url,
        st.pool_size,
        incident_retention_days=st.incident_retention_days,
        stream_retention_days=st.stream_retention_days,
        retention_interval_s=st.retention_interval_s,
    )
    store.migrate()
    rulebook = rulebook_for(settings)
    ratelog.redact_details_with(rulebook.redactor.redact)  # rejected input is logged masked
    model = load_text_model() if settings.use_model else None
    classifier = Classifier(
        rulebook,
        text_model=model,
        novelty=NoveltyDetector(),
        clock=time.time,
        stall_deadlines=settings.stall.deadlines_if_set(),
        crash_loop_attempts=settings.restarts.attempts_if_set(),
    )
    instance_id = settings.instance_id or default_instance_id(
        settings.store.url, settings.api.host, settings.api.port
    )
    dispatcher = Dispatcher(
        store,
        settings.receivers,
        settings.notify,
        instance_id=instance_id,
        fleet=settings.fleet,
        fleet_prone=fleet.prone(rulebook.judgements.get(fleet.KIND)),  # the registered kind
    )
    pipeline = Pipeline(  # the sink every source hands its records to
        store,
        classifier,
        router=dispatcher.router,
        on_commit=dispatcher.wake,
        max_streams=settings.streams.max_in_memory,
        idle_evict_s=settings.streams.idle_evict_s,
    )
    try:
        sources = tuple(s for build in SOURCES for s in build(settings.sources) if s is not None)
    except SourceSettingsError as exc:
        raise ConfigError(exc.problems) from None
    ctx = ServiceContext(
        settings=settings,
        store=store,
        pipeline=pipeline,
        rulebook=rulebook,
        text_model=model,
        instance_id=instance_id,
        sources=sources,
    )
    return Service(ctx=ctx, store=store, pipeline=pipeline, dispatcher=dispatcher)


def web_app(ctx: ServiceContext) -> FastAPI:
    """What ``serve`` runs: the API with the dashboard mounted on it (``/ui/``, ``/`` →
    ``/ui/``, ``/docs`` with local assets)."""
    app = create_app(ctx)
    ui.mount(app)
    return app


async def run(svc: Service) -> None:
    """Serve until uvicorn is told to exit (SIGTERM/SIGINT), then stop cleanly."""
    s = svc.ctx.settings
    # accept() out of descriptors: one bounded line, not one traceback per waiting connection
    asyncio.get_running_loop().set_exception_handler(loop_exception_handler)
    app = web_app(svc.ctx)
    forward_fds = s.sources.forward.max_connections if s.sources.forward else 0
    room = descriptor_room(RESERVED_FDS + forward_fds)
    guard = ConnectionGuard(min(s.api.max_connections, room), s.api.header_timeout_s)
    if guard.max_connections < s.api.max_connections:
        log.warning(
            "api.max_connections %d lowered to %d: the descriptor limit leaves no more",
            s.api.max_connections,
            guard.max_connections,
        )
    server = _Server(
        uvicorn.Config(
            app,
            host=s.api.host,
            port=s.api.port,
            log_level="info",
            access_log=False,
            lifespan="on",
            http=guarded_protocol(guard),
            timeout_keep_alive=s.api.keep_alive_s,
        )
    )
    for source in svc.ctx.sources:  # the pipeline: the sink every source hands records to
        await source.start(svc.pipeline)
    svc.start_threads()
    svc.ctx.ready = True
    try:
        await server.serve()
    finally:
        svc.ctx.ready = False
        for source in svc.ctx.sources:
            await source.stop()
        await asyncio.to_thread(svc.stop_threads)


def rulebook_for(settings: Settings) -> RuleBook:
    """The shipped rules plus ``rules.dirs``, minus ``rules.disabled``, with
    ``rules.overrides`` (:class:`ConfigError` listing what is wrong)."""
    r = settings.rules
    if not (r.dirs or r.disabled or r.overrides):
        return RuleBook()

    try:
        return load_rule_set(r.dirs, r.disabled, r.overrides).rulebook()
    except RuleLoadError as exc:
        raise ConfigError([f"rules: {p}" for p in exc.problems]) from None


def serve(config: str | None = None) -> int:
    """Run the service. A settings file with problems raises :class:`ConfigError` (one line
    per problem; the CLI prints them) before anything starts."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per webhook sent
    settings = load_checked(config)
    check_auth_config(settings.api)  # refuse an open API on a non-loopback host before any work
    check_forward_config(settings.sources.forward)  # nor an open forward port
    problems = serve_problems(settings)  # matchers outside the taxonomy, receivers, rules ...
    if problems:
        raise ConfigError(problems)
    for warning in link_warnings(settings):  # alert links nobody can open: serve anyway
        log.warning("settings: %s", warning)
    svc = build(settings)
    log.info(
        "vllm-sentinel %s: store %s, api %s:%s, kafka %s, receivers %s",
        svc.ctx.instance_id,
        _redact(settings.store.url),
        settings.api.host,
        settings.api.port,
        "on" if settings.sources.kafka else "off",
        [r.name for r in settings.receivers],
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(svc))
    return 0


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url
