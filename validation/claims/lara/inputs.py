"""Input generators of the LARA register ("Harness conventions"), in merged coordinates.

Every generator takes the cell's ``rng`` and returns float64 ``(q, k, v)`` with ``q (N, D)``, ``k (M, D)``,
``v (M, D_v)``; logits are ``q·k`` directly (the ``1/√D`` is merged into ``q`` and ``k``).

* ``gauss`` (G-gauss): ``q, k ~ N(0, σ²I)`` with logit standard deviation ``σ²√D = logit_std``, ``v ~ N(0, I)``;
* ``peaked`` (G-peaked): G-gauss plus a few large keys aligned with their queries (``q_j·k_j = 4·logit_std + 8``),
  so that those rows of attention are close to one-hot;
* ``smooth`` (G-smooth, ViT-like): tokens on an ``H×W`` grid made of a smooth random field (a few random
  Fourier modes), token noise and a shared mean offset, linearly projected to ``q, k, v``; ``q, k`` are
  rescaled to the requested logit standard deviation;
* G-degenerate: ``single_key`` (``M = 1``), ``identical_keys``, ``zero_query``, ``zero_keys``, ``opposite``
  (``k_m = -q_m``, needs ``N = M``), ``duplicated`` (every token twice);
* :func:`norm_inputs` (G-norm): random directions with norms up to ``max_norm``.

Values variants: :func:`values` (``gaussian``, ``one_hot``, ``large``).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["KINDS", "DEGENERATE", "attention_inputs", "norm_inputs", "values", "unit_vectors"]

DEGENERATE = ("single_key", "identical_keys", "zero_query", "zero_keys", "opposite", "duplicated")
KINDS = ("gauss", "peaked", "smooth") + DEGENERATE


def unit_vectors(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """``n`` directions uniform on the sphere ``S^{d-1}`` (``±1`` in ``d = 1``)."""
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def values(rng: np.random.Generator, m: int, dv: int, kind: str = "gaussian") -> np.ndarray:
    """Values: ``gaussian`` ``N(0, I)``, ``one_hot`` rows (a random coordinate set to 1), ``large`` (×100)."""
    if kind == "gaussian":
        return rng.standard_normal((m, dv))
    if kind == "large":
        return 100.0 * rng.standard_normal((m, dv))
    if kind == "one_hot":
        return np.eye(dv)[rng.integers(dv, size=m)]
    raise ValueError(f"unknown values kind {kind!r}")


def _gauss(rng, n, m, d, logit_std):
    sigma = math.sqrt(logit_std / math.sqrt(d))
    return rng.normal(0.0, sigma, (n, d)), rng.normal(0.0, sigma, (m, d))


def _smooth_tokens(rng, count: int, d_model: int = 32, modes: int = 4, noise: float = 0.3,
                   offset: float = 1.0) -> np.ndarray:
    side = max(1, int(round(math.sqrt(count))))
    cols = -(-count // side)
    yy, xx = np.meshgrid(np.arange(side) / side, np.arange(cols) / cols, indexing="ij")
    grid = np.stack([yy.ravel(), xx.ravel()], axis=1)[:count]
    freqs = rng.normal(0.0, 1.5, (modes, 2))
    phases = rng.uniform(0, 2 * math.pi, modes)
    amps = rng.standard_normal((modes, d_model)) / math.sqrt(modes)
    field = np.cos(2 * math.pi * grid @ freqs.T + phases) @ amps
    return field + noise * rng.standard_normal((count, d_model)) + offset * rng.standard_normal(d_model)


def _smooth(rng, n, m, d, dv, logit_std):
    tokens = _smooth_tokens(rng, max(n, m))
    d_model = tokens.shape[1]
    wq, wk, wv = (rng.standard_normal((d_model, c)) / math.sqrt(d_model) for c in (d, d, dv))
    q, k, v = tokens[:n] @ wq, tokens[:m] @ wk, tokens[:m] @ wv
    std = float(np.std(q @ k.T))
    scale = math.sqrt(logit_std / std) if std > 0 else 1.0
    return q * scale, k * scale, v


def attention_inputs(kind: str, rng: np.random.Generator, n: int, m: int, d: int, dv: int | None = None,
                     logit_std: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(q, k, v)`` from generator ``kind`` (see the module docstring); ``dv`` defaults to ``d``."""
    dv = d if dv is None else dv
    if kind == "smooth":
        return _smooth(rng, n, m, d, dv, logit_std)
    if kind == "single_key":
        m = 1
    q, k = _gauss(rng, n, m, d, logit_std)
    v = values(rng, m, dv)
    if kind == "peaked":
        for j in rng.choice(min(n, m), size=min(3, n, m), replace=False):
            k[j] = (4 * logit_std + 8) * q[j] / max(float(q[j] @ q[j]), 1e-12)
    elif kind == "identical_keys":
        k[:] = k[0]
    elif kind == "zero_query":
        q[:] = 0.0
    elif kind == "zero_keys":
        k[:] = 0.0
    elif kind == "opposite":
        if n != m:
            raise ValueError("the 'opposite' generator needs N = M")
        k = -q.copy()
    elif kind == "duplicated":
        q[1::2] = q[0::2][: q[1::2].shape[0]]
        k[1::2] = k[0::2][: k[1::2].shape[0]]
        v[1::2] = v[0::2][: v[1::2].shape[0]]
    elif kind not in ("gauss", "single_key"):
        raise ValueError(f"unknown input kind {kind!r}; expected one of {KINDS}")
    return q, k, v


def norm_inputs(rng: np.random.Generator, n: int, m: int, d: int, max_norm: float, dv: int | None = None):
    """G-norm: random directions with norms uniform on ``[0, max_norm]`` (the first query and key exactly at
    ``max_norm``); values ``N(0, I)``."""
    dv = d if dv is None else dv
    qn = rng.uniform(0, max_norm, n)
    kn = rng.uniform(0, max_norm, m)
    qn[0], kn[0] = max_norm, max_norm
    return unit_vectors(rng, n, d) * qn[:, None], unit_vectors(rng, m, d) * kn[:, None], values(rng, m, dv)
