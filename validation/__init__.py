"""rfkit.validation — claims, Monte Carlo checks, verdicts, results, reports and the ``rfkit`` CLI.

Entry points: :func:`validate` (run claims, get verdicts with evidence), :func:`validate_implementation`
(put a third-party estimator through the claims of its role), :mod:`rfkit.validation.testing`
(statistical assertions for pytest), :mod:`rfkit.validation.stats` (the procedures).
"""

from rfkit.validation.adapters import adapt
from rfkit.validation.engine import validate, validate_implementation

__all__ = ["validate", "validate_implementation", "adapt"]
