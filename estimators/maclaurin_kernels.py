r"""Exact kernelized attention with the dot-product kernels of Macformer's Table 1 (Definition 2).

The kernel table itself (:class:`~rfkit.base.maclaurin.MaclaurinKernel`, :data:`MACLAURIN_KERNELS`,
:func:`kernel_values`) lives in :mod:`rfkit.base.maclaurin`, below both the estimators and the theory; it is
re-exported here. The Gram functions ``K(x, y) = f(x·y)`` are registered in
:data:`rfkit.estimators.kernels.KERNELS` on import.

Design notes
------------
* Arguments outside a closed form's domain raise ``ValueError`` naming the kernel and the largest argument:
  attention is not defined there, and clipping would hide that (``inv`` at ``t = 1`` is a pole).
* :func:`kernelized_attention` is Definition 2 in the masked form of the RMFA display: the multiplicative ``M'``
  form (masked weights are 0) by default, or the *masked fill* form ``f(S ⊙ M)`` of Definition 1 with one of
  :data:`MASK_FILLS`. ``exp`` and ``trigh`` are evaluated at ``S - max_row S`` (log-sum-exp); the shift cancels
  in the ratio because both are exponentials. ``trigh`` (printed ``sinh + cosh``) is evaluated as ``e^t``, its
  numerically stable form (the printed sum cancels catastrophically for ``t ≪ 0``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rfkit.base.checks import NumericalError, as_float_array, as_mask, check_choice, check_same_last_dim
from rfkit.base.maclaurin import MACLAURIN_KERNELS, MaclaurinKernel, get_maclaurin_kernel, kernel_values

from .kernels import KERNELS, dot_product_kernel

__all__ = ["MaclaurinKernel", "MACLAURIN_KERNELS", "MASK_FILLS", "get_maclaurin_kernel", "kernel_values",
           "kernel_scores", "masked_fill", "kernelized_attention", "KernelAttentionStats"]


#: Masked-fill semantics of Definition 1's ``S ⊙ M`` (``M`` boolean, True = keep).
MASK_FILLS = ("additive", "neg_inf", "neg_1e9", "dtype_min")


def kernel_scores(kernel, t, *, mode: str = "closed_form", coefficients=None) -> np.ndarray:
    """``f(t)``: closed form (:func:`kernel_values`) or the truncated series ``Σ_{N<=N_max} a_N t^N``.

    ``coefficients`` (series mode): the sequence ``a_0..a_{N_max}`` (e.g. from
    :func:`rfkit.theory.maclaurin.coefficient_values`), evaluated by Horner's rule.
    """
    mode = check_choice(mode, "mode", ("closed_form", "series"))
    if mode == "closed_form":
        return kernel_values(kernel, t)
    if coefficients is None:
        raise ValueError("series mode needs the coefficients a_0..a_N_max")
    a = as_float_array(coefficients, "coefficients", ndim=1)
    t = np.asarray(t, dtype=np.float64)
    out = np.full(t.shape, a[-1])
    for coefficient in a[-2::-1]:
        out = out * t + coefficient
    return out


def masked_fill(scores: np.ndarray, keep: np.ndarray, fill: str) -> np.ndarray:
    """Definition 1's ``S ⊙ M``: masked positions (``keep = False``) replaced per :data:`MASK_FILLS`."""
    fill = check_choice(fill, "mask_fill", MASK_FILLS)
    if fill == "additive":
        return scores + np.where(keep, 0.0, -np.inf)
    value = {"neg_inf": -np.inf, "neg_1e9": -1e9, "dtype_min": np.finfo(scores.dtype).min}[fill]
    return np.where(keep, scores, value)


@dataclass(frozen=True)
class KernelAttentionStats:
    """Diagnostics of one kernelized-attention call: non-finite outputs and non-positive renormalisers."""

    n_nonfinite: int
    n_nonpositive: int
    n_rows: int


def _keep_mask(n: int, m: int, lead: tuple[int, ...], mask, causal: bool) -> np.ndarray:
    keep = np.ones(lead + (n, m), dtype=bool)
    if mask is not None:
        keep = keep & as_mask(mask, "mask", lead + (n, m))
    if causal:
        if n != m:
            raise ValueError(f"causal attention needs as many queries as keys, got {n} and {m}")
        keep = keep & np.tri(n, m, dtype=bool)
    return keep


def kernelized_attention(q, k, v, kernel="exp", *, mask=None, causal: bool = False, scale: float | None = None,
                         mask_fill: str | None = None, mode: str = "closed_form", coefficients=None,
                         on_nonfinite: str = "raise", return_stats: bool = False):
    r"""Exact kernelized attention (Macformer Definition 2, masked form of the RMFA display).

    .. math::  \mathrm{attn}_K(Q, K, V)_a = \frac{\sum_i M'_{ai} f(x_{ai}) V_i}{\sum_j M'_{aj} f(x_{aj})},
               \qquad x_{ai} = \mathrm{scale}\; q_a \cdot k_i,

    or, with ``mask_fill``, Definition 1's literal form ``Σ_i f((S ⊙ M)_ai) V_i / Σ_j f((S ⊙ M)_aj)``.
    With ``kernel="exp"`` this is softmax attention.

    Parameters
    ----------
    q, k, v : array_like, shapes ``(..., n_q, d)``, ``(..., n_k, d)``, ``(..., n_k, d_v)``
    kernel : str or MaclaurinKernel
        One of :data:`MACLAURIN_KERNELS`.
    mask : bool array, optional
        ``M'`` (True = keep), broadcastable to ``(..., n_q, n_k)``; combined with ``causal``.
    scale : float, optional
        Score scale, default ``1/√d``.
    mask_fill : str, optional
        ``None`` (multiplicative ``M'``, default) or one of :data:`MASK_FILLS`.
    mode, coefficients
        ``closed_form`` (Table 1's ``f``) or ``series`` (see :func:`kernel_scores`).
    on_nonfinite : {"raise", "propagate"}
        What to do with non-finite outputs: raise :class:`NumericalError` (default) or return them (IEEE) and
        count them in the stats.
    return_stats : bool
        Also return :class:`KernelAttentionStats`.

    Raises
    ------
    ValueError
        A score outside the kernel's domain (e.g. ``x >= 1`` for ``inv``), or a query with no kept key.

    Notes
    -----
    Cost ``O(n_q n_k (d + d_v))`` time, ``O(n_q n_k)`` memory. Deterministic.

    Examples
    --------
    Three keys with equal scores: the plain mean of the values.

    >>> kernelized_attention(np.zeros((1, 2)), np.zeros((3, 2)), [[0.0], [3.0], [6.0]], "inv")
    array([[3.]])
    """
    q = as_float_array(q, "q", min_ndim=2)
    k = as_float_array(k, "k", min_ndim=2)
    v = as_float_array(v, "v", min_ndim=2)
    check_same_last_dim(q, k, "q", "k")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of rows, got {k.shape[-2]} and {v.shape[-2]}")
    on_nonfinite = check_choice(on_nonfinite, "on_nonfinite", ("raise", "propagate"))
    spec = get_maclaurin_kernel(kernel)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    scores = (q @ np.swapaxes(k, -1, -2)) * scale
    lead = np.broadcast_shapes(scores.shape[:-2], v.shape[:-2])
    keep = _keep_mask(q.shape[-2], k.shape[-2], lead, mask, causal)
    if not keep.any(axis=-1).all():
        raise ValueError("a query row keeps no key: its attention is 0/0 (excluded by definition)")
    weights = _weights(spec, np.broadcast_to(scores, keep.shape), keep, mask_fill, mode, coefficients)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        num = weights @ v
        den = weights.sum(axis=-1)
        out = num / den[..., None]
    stats = KernelAttentionStats(int(out.size - np.isfinite(out).sum()), int((den <= 0).sum()), int(den.size))
    if stats.n_nonfinite and on_nonfinite == "raise":
        raise NumericalError(f"kernelized attention ({spec.name}) has {stats.n_nonfinite} non-finite output(s)")
    return (out, stats) if return_stats else out


def _weights(spec: MaclaurinKernel, scores, keep, mask_fill, mode, coefficients) -> np.ndarray:
    """Unnormalised attention weights ``f(x)`` (row-shifted for exponential kernels in closed form)."""
    shifted = spec.exponential and mode == "closed_form"
    if mask_fill is None:
        if shifted:
            scores = scores - np.where(keep, scores, -np.inf).max(axis=-1, keepdims=True)
        kept = kernel_scores(spec, np.where(keep, scores, 0.0), mode=mode, coefficients=coefficients)
        return np.where(keep, kept, 0.0)
    filled = masked_fill(scores, keep, mask_fill)
    if shifted:
        filled = filled - filled.max(axis=-1, keepdims=True)
    return kernel_scores(spec, filled, mode=mode, coefficients=coefficients)


def _register() -> None:
    """Add Table 1's Gram functions ``K(x, y) = f(x·y)`` to the shared kernel registry."""
    for name, spec in MACLAURIN_KERNELS.items():
        gram = dot_product_kernel(lambda t, spec=spec: kernel_values(spec, t), name)
        existing = KERNELS.get(name)
        if existing is not None and getattr(existing, "__name__", "") != gram.__name__:
            raise RuntimeError(f"kernel name {name!r} is already registered by another module")
        KERNELS.setdefault(name, gram)


_register()
