r"""Generalized attention features and the Eq 5 random-feature template (Performer Sec 2.2-2.3, A.4, D.3-D.4).

* :func:`template_features` — Performer Eq 5,
  ``φ(x) = h(x)/√m · (f_1(ω_1ᵀx)..f_1(ω_mᵀx), …, f_l(ω_1ᵀx)..f_l(ω_mᵀx))`` with the block layout
  ``[f_1 block | … | f_l block]`` and ``log h`` kept as the rows' ``log_scale`` (never exponentiated), so
  ``E φ(x)ᵀφ(y) = h(x)h(y) Σ_k E f_k(ωᵀx) f_k(ωᵀy)``. Examples: ``f_1 = sgn`` (``h = 1, l = 1``) gives
  the angular kernel ``1 - 2θ/π``; ``(sin, cos)`` with ``h = 1`` gives ``K_gauss``.
* :func:`generalized_features` — generalized attention, the random-feature version
  ``φ(x) = (1/√m)(f(Wx) + ε)`` (Eq 5 with ``h = 1``, ``l = 1``, each feature shifted by
  ``ε = kernel_epsilon``; A.4 uses ``f = ReLU``, ``ε = 10⁻³``), and the deterministic version
  ``φ(x) = f(x) + ε`` (``r = d``, no projection; the authors' code default, and with ``f = elu + 1`` the
  Linear Transformer map of D.4). Its kernel is ``K_f(x, y) = E φ(x)ᵀφ(y)``, exactly ``φ(x)ᵀφ(y)`` in the
  deterministic version (closed forms and quadrature in :mod:`rfkit.theory.generalized`).

Functions (:data:`GENERALIZED_FUNCTIONS`, the D.3 list plus ``elu_plus_one``): ``relu``, ``sigmoid``,
``exp``, ``abs``, ``gelu`` (the exact ``x Φ(x)``, not the tanh approximation), ``cos``, ``tanh``,
``identity``, ``elu_plus_one``. Signed functions (``cos``, ``tanh``, ``identity``, ``gelu``) can make the
attention renormaliser ``D̂_ii <= 0``; :func:`rfkit.estimators.attention.linear_attention` reports it.

``exp`` is kept overflow-free: a row whose largest projection ``c`` is positive is stored as
``exp(p - c) + ε e^{-c}`` with ``c`` moved into ``log_scale``, an exact rewrite of ``exp(p) + ε``.
Projections ``W`` may be dense ``(m, d)`` arrays or structured operators with ``.apply`` and ``.m``
(:mod:`rfkit.estimators.structured`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from rfkit.base.checks import as_float_array, check_choice, check_positive_float
from rfkit.base.laws import GENERALIZED_FUNCTIONS

from .features import Features, project

__all__ = ["GENERALIZED_FUNCTIONS", "template_features", "generalized_features"]


def template_features(x, omega, functions: Sequence[Callable[[np.ndarray], np.ndarray]], *,
                      log_h: Callable[[np.ndarray], np.ndarray] | None = None, dtype=np.float64) -> Features:
    r"""Performer Eq 5: ``φ(x) = h(x)/√m · [f_1(Wx) | … | f_l(Wx)]``, ``r = l·m``.

    Parameters
    ----------
    x : array_like, shape ``(..., L, d)`` (or ``(d,)``)
    omega : ``(m, d)`` array or structured projection
        Rows ``ω_1..ω_m`` (iid, ORF, H/G-ORF, or deterministic).
    functions : sequence of callables
        ``f_1..f_l``, applied elementwise to the ``(..., L, m)`` projections.
    log_h : callable, optional
        ``x (..., L, d) -> log h(x) (..., L)``; ``None`` means ``h = 1``. Kept in ``log_scale``.

    Returns
    -------
    Features
        ``values = [f_1(Wx) | … | f_l(Wx)]``, ``log_scale = log h(x) - ½ log m``.

    Notes
    -----
    ``E φ(x)ᵀφ(y) = h(x) h(y) Σ_k E f_k(ωᵀx) f_k(ωᵀy)`` when each row of ``W`` has the law of ``ω``.
    Cost ``O(Lmd)`` with a dense ``W`` (``O(Lm log d)`` structured) plus ``O(Llm)`` evaluations of ``f``.
    Randomness: none beyond ``omega``.

    Examples
    --------
    The angular kernel: ``sgn(ωᵀx) sgn(ωᵀy)`` is 1 for ``x = y``.

    >>> f = template_features([[1.0, 2.0]], np.array([[0.3, -1.0], [2.0, 0.1]]), [np.sign])
    >>> f.kernel(f)
    array([[1.]])
    """
    if not functions:
        raise ValueError("functions must name at least one f_k (l >= 1)")
    x, proj, m = project(x, omega, dtype=dtype)
    values = np.concatenate([np.asarray(f(proj), dtype=proj.dtype) for f in functions], axis=-1)
    log_scale = np.full(values.shape[:-1], -0.5 * np.log(m), dtype=values.dtype)
    if log_h is not None:
        log_scale = log_scale + np.asarray(log_h(x), dtype=values.dtype)
    return Features(values, log_scale)


def _shifted_exp(p: np.ndarray, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """``exp(p) + ε = e^c (exp(p - c) + ε e^{-c})`` with ``c = max(0, max_row p)``: ``(values, c)``."""
    c = np.maximum(p.max(axis=-1), 0.0)
    with np.errstate(under="ignore"):
        return np.exp(p - c[..., None]) + epsilon * np.exp(-c)[..., None], c


def generalized_features(x, omega=None, *, function: str = "relu", kernel_epsilon: float = 0.0,
                         dtype=np.float64) -> Features:
    r"""Generalized attention features ``(1/√m)(f(Wx) + ε)`` or, with ``omega=None``, ``f(x) + ε``.

    Parameters
    ----------
    x : array_like, shape ``(..., L, d)`` (or ``(d,)``)
        Inputs as the kernel sees them (any ``d^{-1/4}`` scaling is the caller's choice; the paper does
        not specify one for generalized attention).
    omega : ``(m, d)`` array, structured projection, or None
        Projection rows (random-feature version) or None (deterministic version, ``r = d``).
    function : str
        A key of :data:`GENERALIZED_FUNCTIONS` (default ``relu``, "Performer-ReLU").
    kernel_epsilon : float
        ``ε >= 0`` added to every feature (A.4: ``10⁻³``).

    Returns
    -------
    Features
        Random version: ``values = f(Wx) + ε``, ``log_scale = -½ log m`` (Eq 5 with ``h = 1``); the
        authors' code omits ``1/√m``, which rescales ``Â`` by ``m`` and cancels after renormalisation.
        Deterministic version: ``values = f(x) + ε``, ``log_scale = 0``.

    Notes
    -----
    Random version: ``E φ(x)ᵀφ(y) = E (f(ωᵀx) + ε)(f(ωᵀy) + ε)`` for rows with the law of ``ω``; for
    ``f = relu`` and ``ω ~ N(0, I_d)`` this is the arc-cosine kernel
    :func:`rfkit.theory.generalized.relu_kernel`. Cost as :func:`template_features`.

    Examples
    --------
    >>> generalized_features([[1.0, -2.0]], function="relu", kernel_epsilon=0.5).values
    array([[1.5, 0.5]])
    """
    function = check_choice(function, "function", GENERALIZED_FUNCTIONS)
    epsilon = check_positive_float(kernel_epsilon, "kernel_epsilon", allow_zero=True)
    f = GENERALIZED_FUNCTIONS[function]
    if omega is None:
        x = as_float_array(x, "x", dtype=dtype, min_ndim=1)
        x = x[None, :] if x.ndim == 1 else x
        if function == "exp":
            values, shift = _shifted_exp(x, epsilon)
            return Features(values, shift)
        return Features(np.asarray(f(x), dtype=x.dtype) + epsilon, np.zeros(x.shape[:-1], x.dtype))
    if function != "exp":
        return template_features(x, omega, [lambda p: f(p) + epsilon], dtype=dtype)
    # values = Wx, log_scale = -½ log m
    feats = template_features(x, omega, [GENERALIZED_FUNCTIONS["identity"]], dtype=dtype)
    values, shift = _shifted_exp(feats.values, epsilon)
    return Features(values, feats.log_scale + shift)
