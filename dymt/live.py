"""What a playing run says while it plays, besides its dialogues' progress: its live status (calls, outages, cost so
far) for displays that poll, and its provider endpoints' outages as events."""

from __future__ import annotations

import threading
from contextlib import contextmanager

from checkpoints.location import DbLocation
from checkpoints.readers import open_reader
from dymt.events import EventSink, OutageBegan, OutageEnded
from models.call_policy import CallPolicy
from models.circuit import OutageStatus


class LiveStatus:
    """The playing run, read live (dymt.events.RunStatus): calls so far, outages now, cost so far."""

    def __init__(self, policy: CallPolicy, location: DbLocation, run_id: str, pricing) -> None:
        self._policy, self._location, self._run_id, self._pricing = policy, location, run_id, pricing

    def calls(self) -> int:
        return sum(self._policy.stats.calls.values())

    def outages(self) -> list[OutageStatus]:
        return self._policy.outages()

    def muted(self) -> bool:
        """A wrong setting was seen: the run is about to stop with one line, so progress has nothing to add."""
        return bool(self._policy.setting_failures())

    def cost(self) -> float | None:
        """The run's cost so far, read on a connection of its own (None without pricing or if it cannot be read now)."""
        if self._pricing is None:
            return None
        from evals.cost import run_usage

        try:
            with open_reader(self._location) as reader:
                return run_usage(reader, self._run_id).known_cost(self._pricing)
        except Exception:  # noqa: BLE001 - a busy or absent store: no figure now
            return None


@contextmanager
def watching_outages(policy: CallPolicy, run_id: str, on_event: EventSink, every_s: float = 0.5):
    """While the run plays, a thread turns the provider circuits' state into OutageBegan / OutageEnded events."""
    stop = threading.Event()

    def watch() -> None:
        down: dict[str, OutageStatus] = {}
        while not stop.wait(every_s):
            try:
                now = {status.endpoint: status for status in policy.outages()}
                for endpoint, status in now.items():
                    if endpoint not in down:
                        on_event(OutageBegan(run_id, status))
                for endpoint, was in down.items():
                    if endpoint not in now:
                        on_event(OutageEnded(run_id, endpoint, was.down_s))
                down = now
            except Exception:  # noqa: BLE001 - an event sink's error must never stop the run
                continue

    thread = threading.Thread(target=watch, name=f"dymt-outages-{run_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(2)
