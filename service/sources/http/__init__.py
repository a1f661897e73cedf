"""The HTTP sources, served on the API port: ``POST /ingest`` (Fluent Bit ``http``, Fluentd
``out_http``) and ``POST /v1/logs`` (OpenTelemetry logs over OTLP/HTTP). The API's routes
do HTTP only and call the endpoint.

* :mod:`.endpoint` — one endpoint per source, what both share: read, decode under the
  memory budget, join, store; started and stopped like every source.
* :mod:`.decoding` — around both decoders: Content-Encoding, the lease, the HTTP status of
  a refusal.
* :mod:`.body` — a collector's media types and tag (decoding:
  :mod:`service.ingest.collector_body`).
* :mod:`.otlp` — the OTLP/HTTP media types (decoding: :mod:`service.ingest.otlp`).
"""
