"""LangGraph's saver for a store location: in the SQLite file or in PostgreSQL, opened one way."""

from __future__ import annotations

from typing import Any

from checkpoints.location import DbLocation, PostgresURL


def open_checkpointer(location: DbLocation, *, outage: Any = None) -> Any:
    """LangGraph's saver beside the project's tables (an async context manager): in the SQLite file or in PostgreSQL
    (``outage``: the run's store outage, whose budget bounds the saver's waits for a connection)."""
    if isinstance(location, PostgresURL):
        from checkpoints.postgres.saver import open_postgres_saver

        return open_postgres_saver(location, outage=outage)
    from checkpoints.saver import open_saver

    return open_saver(location)
