"""``python -m benchmarks adaptive --stub-limit N``: the flag belongs to that benchmark and takes no negative limit."""

from __future__ import annotations

import pytest

from benchmarks.__main__ import main as benchmarks_main


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["overhead", "--stub-limit", "3"], "--stub-limit belongs to the adaptive benchmark"),
        (["--stub-limit", "3"], "--stub-limit belongs to the adaptive benchmark"),
        (["adaptive", "--stub-limit", "-1"], "--stub-limit must be 0 (no limit) or more, not -1"),
    ],
)
def test_stub_limit_is_refused_outside_the_adaptive_benchmark_or_below_zero(argv, said, capsys):
    with pytest.raises(SystemExit) as exited:
        benchmarks_main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert said in err.strip().splitlines()[-1]
