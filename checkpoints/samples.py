"""Repeated samples of one dialogue (``graph.run --samples K``): their sampling seeds.

Sample 0 keeps the run's sampling seed, so a run with one sample is exactly a run as before; sample k > 0
draws from a seed derived from (run sampling seed, k). Its thread id (``#k``) is made in checkpoints/ids.py.
"""

from __future__ import annotations

import hashlib


def sample_seed(run_seed: int, sample: int) -> int:
    """The sampling seed of sample ``sample``: the run's own for sample 0, a derived 31-bit one after."""
    if sample == 0:
        return run_seed
    digest = hashlib.sha256(f"dymt-esb-sample:{run_seed}:{sample}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 2**31
