"""Ingest: decoding, from a transport's unit (a line, a record) up to the plain
:class:`service.records.LogRecord`. No I/O of its own: the sources (:mod:`service.sources`)
read the bytes and call it; it never imports them.

- :mod:`.envelope` — one line (raw, Docker json-file, CRI) or one Fluent Bit / Fluentd record
  to records: detects the envelope and hands it to its family, :mod:`.container_lines` (CRI,
  Docker), :mod:`.fluent_record` (line field, metadata, stream key), :mod:`.json_text`,
  :mod:`.salvage` (broken UTF-8, over-long lines), :mod:`.lines` (one record per line).
- :mod:`.joiner` — rejoins Docker 16 KiB partials and CRI ``P`` chunks (bounded, flushable).
- :mod:`.documents` — whole JSON documents (``kubectl get ... -o json``) to records.
- :mod:`.kube` — Kubernetes events and pod status as evidence lines.
- :mod:`.vllm_json` — vLLM's JSON log records back to its text lines.

Helpers: :mod:`.timestamps`, :mod:`.runtime_paths` (identity from kubelet/Docker paths and
tail tags), :mod:`.msgpack_events`, :mod:`.compression`, :mod:`.budget` (the process-wide
budget for decompressed input).
Every rejected input is counted with :func:`service.ratelog.reject` (source, reason).
"""
