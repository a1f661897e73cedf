"""Sources: one component per transport, each turning what a collector sends into
:class:`~service.records.LogRecord` s and handing them to the sink it is given (the
pipeline, in the service). A source never imports the pipeline, the store, the API or the
app; decoding below the transport is :mod:`service.ingest`'s.

- :mod:`.base` — the :class:`~.base.Sink` contract and what every source offers: a name,
  ``await start(sink)``, ``await stop()``, ``health()``.
- :mod:`.kafka` — Kafka consumer groups, at least once (kafka-python or confluent-kafka).
- :mod:`.forward` — the Fluentd Forward Protocol v1 server (ack after the sink stored).
- :mod:`.http` — ``POST /ingest`` and ``POST /v1/logs`` (OTLP), served by the API's routes.
- :mod:`.files` — log files and stdin (the CLI, ``/classify``).

``http.endpoint.http_sources``, ``forward.factory.forward_source`` and
``kafka.factory.kafka_source`` build the service's sources from their settings
(``sources.http``, ``sources.forward``, ``sources.kafka``), not started.
"""
