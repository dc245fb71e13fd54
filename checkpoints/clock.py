"""The store's one timestamp: UTC, ISO 8601, milliseconds (every table's ``created_at`` / ``updated_at``)."""

from __future__ import annotations

from datetime import UTC, datetime


def now() -> str:
    """UTC timestamp in ISO 8601."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")
