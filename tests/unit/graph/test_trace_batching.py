"""Writes queued while the store's thread is busy (tracer batches, turn records) share one transaction, each its own
savepoint."""

from __future__ import annotations

import threading

import pytest

from checkpoints.store import Writer, open_writer
from graph.running.store_writer import StoreWriter


def test_queued_batches_share_one_commit_and_a_failing_one_loses_only_itself(tmp_path, monkeypatch):
    store = open_writer(tmp_path / "d.db")
    store.db.execute("create table probe (n integer)")

    def write_batch(
        writer, encoder, items, final=False, *, through=None
    ):  # as traces.write_trace_batch: its rows in a transaction
        with writer.transaction():
            writer.db.execute("insert into probe values (?)", [items[0]])
            if items[0] == 2:
                raise ValueError("a bad batch")

    monkeypatch.setattr("checkpoints.traces.tables.write_trace_batch", write_batch)
    transactions = []
    original = Writer.write_together
    monkeypatch.setattr(
        Writer, "write_together", lambda self, writes: transactions.append(len(writes)) or original(self, writes)
    )
    write = StoreWriter(store)
    gate = threading.Event()
    write.submit(lambda _store: gate.wait(10))  # the thread is busy: the three batches queue up
    futures = [write.queue_trace_batch(None, [n]) for n in (1, 2, 3)]  # type: ignore[arg-type]
    gate.set()
    write.close()
    assert transactions == [3]
    assert futures[0].result() is None and futures[2].result() is None
    with pytest.raises(ValueError, match="a bad batch"):
        futures[1].result()
    assert [n for (n,) in store.db.execute("select n from probe order by n")] == [1, 3]
    assert not store.db.conn.in_transaction
    with pytest.raises(RuntimeError):
        write.queue_trace_batch(None, [4])  # type: ignore[arg-type]
