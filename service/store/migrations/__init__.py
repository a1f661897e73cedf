"""Alembic migrations, run programmatically by :func:`service.store.migrate.upgrade`."""
