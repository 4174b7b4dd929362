"""Inputs of the EVA register's standard sweep (SW): query/key/value generators and proposal means.

Generators (register "Input generators and the standard sweep"), all drawn from the cell's ``rng``:

* ``iid`` — ``q, k ~ N(0, s² I_d)`` (G-iid);
* ``clustered`` / ``clustered_shuffled`` — keys from ``min(4, M)`` isotropic clusters (centre spread ``2s``,
  within-cluster spread ``s/4``), stored contiguously (aligned with contiguous chunks) or shuffled (G-clust);
* ``peaked`` — each query parallel to one key, ``q_n = 3 k_j/‖k_j‖`` (near one-hot softmax, G-peaked);
* ``flat`` — ``q = 0`` (uniform softmax, G-flat);
* ``outlier`` — iid, then one key of norm 10 and queries of norm 5: ``|q·k|`` up to 50 (G-outlier, needs
  log space);
* ``transformer`` — token embeddings ``x ~ N(0, I)`` through random ``d×d`` projections (scaled ``1/√d``);
  use it with ``frame="sqrt_d"`` (G-transformer).

Values (G-values): ``iid`` ``N(0, I)``, ``equal`` (one vector for all keys), ``one_hot`` (``v_m = e_{m mod
d_v}``), ``keys`` (``v_m = k_m``; ``d_v = d``), ``correlated`` (``v_m`` grows with ``q̄·k_m``).

Proposal means (``mu``): ``zero``, ``q+mean_k`` (``q_1 + mean_m k_m``), ``q+k1``, ``random`` (``N(0, I)``),
``far`` (``‖μ‖ = 3``); they use the first query, so one proposal serves every query of a cell.
"""

from __future__ import annotations

import numpy as np

__all__ = ["GENERATORS", "VALUE_KINDS", "MEANS", "attention_inputs", "values_for", "proposal_mean"]

GENERATORS = ("iid", "clustered", "clustered_shuffled", "peaked", "flat", "outlier", "transformer")
VALUE_KINDS = ("iid", "equal", "one_hot", "keys", "correlated")
MEANS = ("zero", "q+mean_k", "q+k1", "random", "far")


def _keys(kind: str, m: int, d: int, s: float, rng: np.random.Generator) -> np.ndarray:
    if kind.startswith("clustered"):
        groups = min(4, m)
        centres = rng.normal(scale=2 * s, size=(groups, d))
        keys = centres[np.arange(m) * groups // m] + rng.normal(scale=s / 4, size=(m, d))
        return rng.permutation(keys) if kind == "clustered_shuffled" else keys
    return rng.normal(scale=s, size=(m, d))


def _queries(kind: str, n: int, keys: np.ndarray, s: float, rng: np.random.Generator) -> np.ndarray:
    d = keys.shape[1]
    if kind == "flat":
        return np.zeros((n, d))
    if kind == "peaked":
        picks = keys[rng.integers(keys.shape[0], size=n)]
        norms = np.maximum(np.linalg.norm(picks, axis=1, keepdims=True), 1e-12)
        return 3.0 * picks / norms
    return rng.normal(scale=s, size=(n, d))


def values_for(kind: str, q: np.ndarray, k: np.ndarray, dv: int, rng: np.random.Generator) -> np.ndarray:
    """Values ``(M, d_v)`` of one of :data:`VALUE_KINDS`."""
    m = k.shape[0]
    if kind == "iid":
        return rng.normal(size=(m, dv))
    if kind == "equal":
        return np.broadcast_to(rng.normal(size=dv), (m, dv)).copy()
    if kind == "one_hot":
        return np.eye(dv)[np.arange(m) % dv]
    if kind == "keys":
        if dv != k.shape[1]:
            raise ValueError("values='keys' needs d_v = d")
        return k.copy()
    if kind == "correlated":
        score = k @ q.mean(axis=0)
        return score[:, None] + 0.1 * rng.normal(size=(m, dv))
    raise ValueError(f"unknown values {kind!r}; expected one of {VALUE_KINDS}")


def attention_inputs(kind: str, n: int, m: int, d: int, dv: int, rng: np.random.Generator, *, scale: float = 0.5,
                     values: str = "iid") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(q (N, d), k (M, d), v (M, d_v))`` from one of :data:`GENERATORS` with spread ``scale``."""
    if kind not in GENERATORS:
        raise ValueError(f"unknown generator {kind!r}; expected one of {GENERATORS}")
    if kind == "transformer":
        x = rng.normal(size=(max(n, m), d))
        wq, wk = rng.normal(scale=d ** -0.5, size=(2, d, d))
        q, k = x[:n] @ wq, x[:m] @ wk
    else:
        k = _keys(kind, m, d, scale, rng)
        q = _queries(kind, n, k, scale, rng)
        if kind == "outlier":
            k[0] *= 10.0 / max(np.linalg.norm(k[0]), 1e-12)
            q *= 5.0 / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
    return q, k, values_for(values, q, k, dv, rng)


def proposal_mean(kind: str, q: np.ndarray, k: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A proposal mean ``μ`` ``(d,)`` of one of :data:`MEANS` (built from the first query)."""
    d = q.shape[1]
    if kind == "zero":
        return np.zeros(d)
    if kind == "q+mean_k":
        return q[0] + k.mean(axis=0)
    if kind == "q+k1":
        return q[0] + k[0]
    if kind == "random":
        return rng.normal(size=d)
    if kind == "far":
        u = rng.normal(size=d)
        return 3.0 * u / np.linalg.norm(u)
    raise ValueError(f"unknown proposal mean {kind!r}; expected one of {MEANS}")
