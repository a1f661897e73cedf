"""The service's Forward source from ``sources.forward`` (:class:`ForwardSource`).

Chunk ids are on (a chunk resent because its ack was lost is acked again, not applied
twice); TLS comes from ``tls_cert`` / ``tls_key``. A certificate that cannot be loaded is a
:class:`~service.sources.base.SourceSettingsError` naming the settings.
"""

from __future__ import annotations

import logging
import ssl

from service.config import ForwardSettings
from service.records import LogRecord
from service.sources.base import Sink, SourceHealth, SourceSettingsError
from service.sources.forward.server import ForwardServer, tls_context

SOURCE = "forward"
log = logging.getLogger("vllm_sentinel")


class ForwardSource:
    """The Forward server of ``settings``, listening on the event loop once started with the
    sink it hands its chunks to."""

    source = SOURCE

    def __init__(self, settings: ForwardSettings) -> None:
        self.settings = settings
        self.sink: Sink | None = None
        self.server = ForwardServer(
            self._submit,
            settings.host,
            settings.port,
            shared_key=settings.shared_key,
            tls=_tls(settings),
            self_hostname=settings.self_hostname,
            chunk_ids=True,
            max_message_bytes=settings.max_message_bytes,
            max_connections=settings.max_connections,
            idle_timeout=settings.idle_timeout_s,
            max_pending_bytes=settings.max_pending_bytes,
            allow_unauthenticated=settings.allow_unauthenticated,
        )

    async def start(self, sink: Sink) -> None:
        """Bind and accept connections (refused on an exposed address without a key)."""
        self.sink = sink
        await self.server.start()
        log.info("forward protocol on %s:%s", self.server.host, self.server.port)

    async def stop(self) -> None:
        """Close every connection; the lines held unfinished go to the sink."""
        await self.server.stop()

    def health(self) -> SourceHealth:
        return self.server.health()

    async def _submit(self, records: list[LogRecord], chunk_id: str | None) -> bool:
        assert self.sink is not None  # the server runs only once started
        return await self.sink.submit(records, source=SOURCE, chunk_id=chunk_id)


def _tls(settings: ForwardSettings) -> ssl.SSLContext | None:
    if not settings.tls_cert:
        return None
    try:
        return tls_context(settings.tls_cert, settings.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise SourceSettingsError(
            [
                f"sources.forward.tls_cert / tls_key: cannot load: "
                f"{getattr(exc, 'strerror', None) or exc}"
            ]
        ) from None


def forward_source(settings: ForwardSettings | None) -> ForwardSource | None:
    """The service's Forward source (not started), None when the source is off
    (``sources.forward: null``)."""
    return None if settings is None else ForwardSource(settings)
