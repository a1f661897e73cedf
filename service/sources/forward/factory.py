"""The service's Forward source from ``sources.forward`` and the sink it hands records to.

Chunk ids are on (a chunk resent because its ack was lost is acked again, not applied
twice); TLS comes from ``tls_cert`` / ``tls_key``. A certificate that cannot be loaded is a
:class:`~service.sources.base.SourceSettingsError` naming the settings.
"""

from __future__ import annotations

import ssl

from service.config import ForwardSettings
from service.records import LogRecord
from service.sources.base import Sink, SourceSettingsError
from service.sources.forward.server import ForwardServer, tls_context

SOURCE = "forward"


def forward_source(settings: ForwardSettings | None, sink: Sink) -> ForwardServer | None:
    """A Forward server for ``settings`` (not started: ``await start()``); None when the
    source is off (``sources.forward: null``)."""
    if settings is None:
        return None
    tls = None
    if settings.tls_cert:
        try:
            tls = tls_context(settings.tls_cert, settings.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise SourceSettingsError(
                [
                    f"sources.forward.tls_cert / tls_key: cannot load: "
                    f"{getattr(exc, 'strerror', None) or exc}"
                ]
            ) from None

    async def submit(records: list[LogRecord], chunk_id: str | None) -> bool:
        return await sink.submit(records, source=SOURCE, chunk_id=chunk_id)

    return ForwardServer(
        submit,
        settings.host,
        settings.port,
        shared_key=settings.shared_key,
        tls=tls,
        self_hostname=settings.self_hostname,
        chunk_ids=True,
        max_message_bytes=settings.max_message_bytes,
        max_connections=settings.max_connections,
        idle_timeout=settings.idle_timeout_s,
        max_pending_bytes=settings.max_pending_bytes,
        allow_unauthenticated=settings.allow_unauthenticated,
    )
