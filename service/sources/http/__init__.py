"""The HTTP sources, served on the API port: ``POST /ingest`` (Fluent Bit ``http``, Fluentd
``out_http``) and ``POST /v1/logs`` (OpenTelemetry logs over OTLP/HTTP). The API's routes
do HTTP only and call the endpoint.

* :mod:`.endpoint` — what both share: read, decode under the memory budget, join, store.
* :mod:`.body` — one collector body to records (msgpack, JSON, NDJSON, text; gzip).
* :mod:`.otlp` — one OTLP ``ExportLogsServiceRequest`` to records (protobuf or JSON; gzip).
"""
