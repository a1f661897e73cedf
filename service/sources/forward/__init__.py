"""The Fluentd Forward Protocol v1 source (Fluent Bit ``forward`` output, Fluentd
``out_forward``).

* :mod:`.server` — :class:`~.server.ForwardServer`: the listener, its limits, start and stop.
* :mod:`.connection` — one connection: handshake, read, deliver, ack; the frame budget.
* :mod:`.handshake` — the shared-key HELO / PING / PONG exchange.
* :mod:`.messages` — the four message modes to records and chunk ids.
* :mod:`.delivery` — joining runtime chunks and calling the sink.
"""
