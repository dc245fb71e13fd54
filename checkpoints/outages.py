"""An outage that outlasted its budget: the run stops cleanly, nothing lost, and the same command resumes it."""

from __future__ import annotations


class OutageError(Exception):
    """A provider, the store or the disk stayed unavailable past its budget; the CLI prints one line and exits 75."""


_UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str | float | int) -> float:
    """Seconds from ``600``, ``90s``, ``10m``, ``10min`` or ``1h`` (a number alone is seconds); ValueError if not one."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        raw = str(text).strip().lower()
        unit = next((u for u in ("min", "s", "m", "h") if raw.endswith(u)), "")
        try:
            value = float(raw[: len(raw) - len(unit)].strip()) * _UNITS.get(unit, 1.0)
        except ValueError:
            raise ValueError(f"{text!r} is not a duration: give seconds (600) or 90s, 10m, 1h") from None
    if not value > 0:
        raise ValueError(f"{text!r} must be a duration of more than 0 seconds")
    return value
