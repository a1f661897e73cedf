"""Kafka sources: consume collector output from Kafka at least once.

One interface, one module per client library (like drain3's persistence backends):

* :mod:`.base` — :class:`~.base.KafkaSourceBase`, everything the backends share: the poll →
  decode → handle → commit loop, rewinding after a failed batch, back-off, consumer-lag
  metrics, ``run()`` / ``start()`` / ``stop()``; the delivery contract is stated there.
* :mod:`.partition` — one assigned partition: its runtime-chunk joiner, the lines it holds,
  the offset safe to commit.
* :mod:`.value` — one message value to records (JSON, msgpack or text lines).
* :mod:`.client_config` — :class:`~service.config.KafkaSettings` to each client library's
  consumer configuration.
* :mod:`.kafka_python` — :class:`~.kafka_python.KafkaSource`, kafka-python 3.0
  (``client: kafka-python``, the default).
* :mod:`.confluent` — :class:`~.confluent.ConfluentKafkaSource`, confluent-kafka (librdkafka;
  ``client: confluent-kafka``, optional extra).
* :mod:`.factory` — :func:`~.factory.make_kafka_source` picks the backend from the settings:
  the one module that names both.
"""
