"""Sources: one component per transport, each handing :class:`~service.records.LogRecord` s
to the sink it is given."""
