"""The REST API: incidents, streams, silences, feedback, classify, ingest, health, metrics.

``create_app(ctx)`` builds the FastAPI application around a running
:class:`service.context.ServiceContext`; one router per resource under ``routers/``.
"""

from service.api.app import create_app

__all__ = ["create_app"]
