"""Input generators shared by the Macformer claim modules (masks, unit-ball matrices, Gaussian Q, K, V)."""

import numpy as np

from rfkit.estimators.ppsbn import matrix_norm


def _mask(kind: str, n: int, rng: np.random.Generator) -> np.ndarray | None:
    """``M'`` (True = keep) of a mask type; every row keeps at least one key."""
    if kind in ("none", "causal"):
        return None if kind == "none" else np.tri(n, dtype=bool)
    if kind == "padding":
        keep = rng.random(n) < 0.7
        keep[rng.integers(n)] = True
        return np.broadcast_to(keep, (n, n)).copy()
    keep = rng.random((n, n)) < 0.5
    keep[np.arange(n), rng.integers(n, size=n)] = True
    return keep


def _ball_matrix(rng: np.random.Generator, n: int, d: int, reading: str, placement: str,
                 positive: bool = False) -> np.ndarray:
    """A matrix in the unit ball ``ℓ2(0,1)`` of a reading: on its boundary (norm 1) or inside (norm in [0.3, 0.9];
    each row's for ``row``)."""
    x = np.abs(rng.standard_normal((n, d))) if positive else rng.standard_normal((n, d))
    radius = 1.0 if placement == "boundary" else rng.uniform(0.3, 0.9)
    if reading == "row" and placement != "boundary":  # per-row radii (drawn after the scalar: seeds unchanged)
        radius = rng.uniform(0.3, 0.9, size=(n, 1))
    return x * radius / matrix_norm(x, reading)


def _ball_matrix_like(x: np.ndarray, reading: str) -> np.ndarray:
    """``x`` shrunk into the unit ball of a reading where it lies outside (rows one by one for ``row``)."""
    return x / np.maximum(matrix_norm(x, reading), 1.0)


def _gaussian_qkv(rng: np.random.Generator, n: int, d: int, scale: float = 0.5):
    """Gaussian ``Q, K`` (entries N(0, scale²)) and standard Gaussian ``V``, all ``(n, d)``."""
    return rng.standard_normal((n, d)) * scale, rng.standard_normal((n, d)) * scale, rng.standard_normal((n, d))
