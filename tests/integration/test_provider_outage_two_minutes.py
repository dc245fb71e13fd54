"""A provider gone for 2 minutes mid-run: graph.run rides it out (default outage budget), nothing failed, nothing paid
twice."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.support.provider_outage import StubProcess, paid_twice, run_flags, start_run, stored_turns

OUTAGE_S = float(os.environ.get("DYMT_ESB_OUTAGE_S", "120"))


@pytest.mark.integration
def test_a_two_minute_provider_outage_mid_run_fails_no_dialogue(tmp_path: Path):
    stub = StubProcess(tmp_path / "answered.log", latency=0.2).start()
    db, run_id = tmp_path / "outage.db", "outage-long"
    started = time.monotonic()
    try:
        run = start_run(*run_flags(stub.url, db, run_id, turns=4, per_category=4, concurrency=8))
        stub.wait_answered(40, run)  # a few turns in: some dialogues mid-turn, calls in flight
        stub.stop()
        answered_before = len(stub.answered())
        time.sleep(OUTAGE_S)
        assert run.poll() is None, "the run ended during the outage"
        stub.start()
        out, err = run.communicate(timeout=600)
    finally:
        stub.stop()
    wall = time.monotonic() - started
    assert run.returncode == 0, err[-3000:]
    assert "Traceback" not in err
    summary = json.loads(out)
    assert summary["dialogues"] == summary["finished"] == 24 and summary["failed"] == []
    turns = stored_turns(db, run_id)
    assert len(turns) == 24 and all(t == [(i, True, True) for i in (1, 2, 3, 4)] for t in turns.values())
    answered = stub.answered()
    assert paid_twice(answered) == 0
    outages = summary.get("outages") or {}
    print(
        f"\n2-minute outage: {len(turns)} dialogues finished, 0 failed, exit 0, wall {wall:.0f} s, "
        f"{len(answered)} calls answered ({answered_before} before the outage), outages {outages}"
    )
