"""Repeated samples of one dialogue (``graph.run --samples K``): their thread ids and sampling seeds.

Sample 0 keeps the plain thread id and the run's sampling seed, so a run with one sample is
exactly a run as before; sample k > 0 appends ``#k`` to the thread id and draws from a seed
derived from (run sampling seed, k). Readers recover the sample from the thread id alone.
"""

from __future__ import annotations

import hashlib
import re

_SUFFIX = re.compile(r"#(\d+)$")


def sample_thread_id(thread_id: str, sample: int) -> str:
    """The thread id of sample ``sample`` of a dialogue (``thread_id`` itself for sample 0)."""
    if sample < 0:
        raise ValueError(f"sample must be >= 0, got {sample}")
    return thread_id if sample == 0 else f"{thread_id}#{sample}"


def sample_of(thread_id: str) -> int:
    """Which sample a thread is (0 for a thread without a ``#k`` suffix, such as a branch)."""
    match = _SUFFIX.search(thread_id)
    return int(match.group(1)) if match else 0


def sample_seed(run_seed: int, sample: int) -> int:
    """The sampling seed of sample ``sample``: the run's own for sample 0, a derived 31-bit one after."""
    if sample == 0:
        return run_seed
    digest = hashlib.sha256(f"dymt-esb-sample:{run_seed}:{sample}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 2**31
