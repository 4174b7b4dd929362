"""The guide ``docs/claims.md`` ("write a claim for your own estimator") runs as written.

Its example is an exactly unbiased estimator tested with theory's variance (a Catoni sequence at the
engine's level alpha = 1e-3 over 6 cells): the chance that it is wrongly refuted is at most 1e-3.
"""

from __future__ import annotations

import re
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "claims.md"


def test_the_guide_example_runs_and_supports_its_claim(capsys):
    code = re.search(r"```python\n(.*?)```", GUIDE.read_text(), re.S).group(1)
    namespace: dict = {}
    exec(compile(code, str(GUIDE), "exec"), namespace)  # noqa: S102 - our own documentation
    printed = capsys.readouterr().out
    assert printed.startswith("supported"), printed
    claim = namespace["MY_CLAIM"]
    assert claim.paper == "core" and "r ∈ [0, 3]" in claim.hypotheses
