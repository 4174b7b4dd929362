"""Helpers shared by the Macformer claim modules: reading products, capped violations, exact evidence."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Sequence

import numpy as np

from rfkit.estimators.maclaurin_kernels import MACLAURIN_KERNELS
from rfkit.validation.model import CellContext
from rfkit.validation.stats import (
    Evidence,
    exact_test,
)

KERNEL_NAMES = tuple(MACLAURIN_KERNELS)
LIMITED = ("inv", "log", "sqrt")  # kernels with R_f = 1


def _readings(**axes: Sequence) -> dict[str, dict]:
    """Variant name -> reading dict for the product of reading axes (names join the values with ``|``)."""
    return {"|".join(str(v) for v in combo): dict(zip(axes, combo, strict=True))
            for combo in itertools.product(*axes.values())}


def _capped(values, cap: float = 1.0) -> np.ndarray:
    """Violations with non-finite entries counted as ``cap`` and everything capped at ``cap``."""
    values = np.asarray(values, dtype=np.float64)
    return np.where(np.isfinite(values), np.minimum(values, cap), cap)


def _capped_relative(got, want, scale) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return _capped(np.abs(np.asarray(got) - np.asarray(want)) / scale)


def _exact(values, ctx: CellContext, extra: dict | None = None, tolerance: float | None = None) -> Evidence:
    """Exact evidence on capped violations (largest entry), at the claim's or a stricter tolerance."""
    violation = _capped(values)
    tol = ctx.tolerance if tolerance is None else tolerance
    return exact_test(float(violation.max(initial=0.0)), 0.0, tolerance=tol, extra=extra)




def _quiet(fn: Callable, *args, **kwargs):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


RESOLUTION = 0.5


def _replicate_cap(ctx: CellContext, need: float, share: int = 1) -> tuple[int, bool]:
    """Replicates for a cell needing ``need`` (from exact moments), capped at the tier's budget (divided by
    ``share`` for replicates that cost several features each)."""
    cap = ctx.replicates // share
    return int(min(max(need, 2_000), cap)), need > cap


