"""Ingest: sources and envelopes up to the plain :class:`service.records.LogRecord`.

- :mod:`.envelope` — one line (raw, Docker json-file, CRI) or one Fluent Bit / Fluentd record
  to records; stream key, metadata, runtime time.
- :mod:`.joiner` — rejoins Docker 16 KiB partials and CRI ``P`` chunks (bounded, flushable).
- :mod:`.files` — files / stdin (plain or gzip) to records.
- :mod:`.forward` — Fluentd Forward Protocol v1 server (ack after the sink stored the batch).
- :mod:`.http_body` — one Fluent Bit / Fluentd HTTP output body to records.

Helpers: :mod:`.timestamps`, :mod:`.runtime_paths` (identity from kubelet/Docker paths and
tail tags), :mod:`.msgpack_events`, :mod:`.compression`, :mod:`.forward_handshake`.
Every rejected input is counted with :func:`service.ratelog.reject` (source, reason).
"""
