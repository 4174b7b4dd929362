"""Progress of long runs: lines where there is no terminal (issue "The face of a verdict": non-TTY runs show
progress). Deterministic (no randomness); the planted bug is a run that prints nothing until it ends."""
from __future__ import annotations

import io
import subprocess
import sys

import pytest

from rfkit.validation.progress import LineProgress, progress


def test_lines_at_start_on_interval_and_at_end():
    out = io.StringIO()
    bar = LineProgress(4, "validate (smoke)", file=out, interval=1e-9)
    bar.set_postfix_str("performer.eq1.x")
    bar.update(1)
    bar.total += 2
    bar.set_description("validate (smoke, extending 2 undecided)")
    bar.update(5)
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("validate (smoke): 0/4 cells (0%)")
    assert "1/4 cells (25%)" in lines[1] and "left at the rate so far" in lines[1] and "[performer.eq1.x]" in lines[1]
    assert lines[-1].startswith("validate (smoke, extending 2 undecided): 6/6 cells (100%)")
    assert lines[-1].endswith(", done")


def test_no_line_between_intervals():
    out = io.StringIO()
    bar = LineProgress(100, "x", file=out, interval=3600)
    for _ in range(99):
        bar.update()
    assert len(out.getvalue().splitlines()) == 1  # the start line only
    bar.close()
    assert len(out.getvalue().splitlines()) == 2


def test_invalid_interval_and_disabled_progress():
    with pytest.raises(ValueError, match="interval"):
        LineProgress(1, "x", interval=0)
    assert progress(10, "x", show=False) is None


def test_a_non_interactive_cli_run_shows_progress(tmp_path):
    # stderr is a pipe here, as in CI or under nohup: the run must say how far it is, not stay silent
    proc = subprocess.run([sys.executable, "-m", "rfkit.validation", "validate", "--claim",
                           "performer.eq11.prefix_sum_identity", "--tier", "smoke", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "validate (smoke): 0/" in proc.stderr and "figures: 1/1 figures (100%)" in proc.stderr
    assert proc.stderr.count(", done") == 2
