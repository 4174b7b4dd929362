r"""Monte Carlo estimators of *beautiful functions* (Performer ``003_4855bc6ab225d7a6.txt``, App. F.4).

A beautiful function (Definition 1, Eq 36) is

.. math::  F_{Ω,g}(z) = E_{ω∼Ω}\, g(ωᵀz),

with ``Ω`` isotropic on ``R^d`` and ``g(u) = Σ_s a_s u^s`` entire with every ``a_s ≥ 0``. The softmax
kernel is one (Remark 1, Eq 37): ``SM(x, y) = Λ·F_{N(0,I), exp}(x + y)`` with
``Λ = exp(-(‖x‖²+‖y‖²)/2)``, and so is the regularized kernel with ``Ω_reg = Unif(√d S^{d-1})``.

The two objects that define ``F`` live in :mod:`rfkit.base.laws` (below both the estimators and the theory) and
are re-exported here; this module holds the estimators of Eqs 38-39:

* :class:`IsotropicLaw` — ``Ω`` as the law of ``ω = R·u`` with ``u`` uniform on ``S^{d-1}`` and an
  independent radius ``R`` (``chi``: ``Ω = N(0, I_d)``; ``sqrt_d``: ``Ω_reg``; ``uniform``: ``R`` uniform on
  ``[0, radius]``, default ``2√d``; ``fixed``: ``R = radius``). Every isotropic law has this form.
* :class:`Maclaurin` — ``g`` by its non-negative Maclaurin coefficients, with closed forms for
  ``scale·exp(rate·u)``, ``scale·cosh(rate·u)`` and polynomials.
* :func:`beautiful_terms` / :func:`beautiful_estimate` — ``X_i = g(ω_iᵀz)`` and their average,
  ``F̂^iid_m`` (iid ``ω_i``, Eq 38) or ``F̂^ort_m`` (Eq 39: pairwise orthogonal ``ω_i``, each marginally
  ``Ω``, ``m <= d``): a Haar-distributed ``m``-frame (:func:`~rfkit.estimators.orthogonal_projection`)
  with independent radii from the radial law — the construction of the proof of Theorem 5 (Eq 53).

Design notes
------------
* The law is given by its radial part because that is what both the estimator (sampling) and the theory
  (radial moments ``E‖ω‖^j``, :mod:`rfkit.theory.beautiful`) need; one object serves both.
* ``g`` is restricted to the families above, each with exact log-coefficients, so that every series in
  the theory module is evaluated from the same coefficients the estimator's ``g`` has.
* Estimators are batched: ``size`` independent estimates come from one ``(size, m, d)`` projection array.
"""

from __future__ import annotations

import numpy as np

from rfkit.base.checks import as_float_array, check_positive_int, check_rng
from rfkit.base.laws import G_KINDS, RADIAL_LAWS, IsotropicLaw, Maclaurin

from .projections import gaussian_projection, orthogonal_projection

__all__ = ["RADIAL_LAWS", "G_KINDS", "IsotropicLaw", "Maclaurin", "beautiful_projections", "beautiful_terms",
           "beautiful_estimate"]

def _check_law(law, name: str = "law") -> IsotropicLaw:
    if not isinstance(law, IsotropicLaw):
        raise TypeError(f"{name} must be an IsotropicLaw, got {type(law).__name__}")
    return law


def _check_g(g) -> Maclaurin:
    if not isinstance(g, Maclaurin):
        raise TypeError(f"g must be a Maclaurin series, got {type(g).__name__}")
    return g


def beautiful_projections(law: IsotropicLaw, m: int, *, rng, orthogonal: bool = False,
                          size: int | None = None) -> np.ndarray:
    """Rows ``ω_1..ω_m`` marginally ``Ω``: iid, or pairwise orthogonal (``orthogonal=True``, ``m <= d``).

    Parameters
    ----------
    law : IsotropicLaw
    m : int
        Number of rows; ``m <= d`` when ``orthogonal``.
    rng : numpy Generator or seed
    orthogonal : bool
        ``False``: iid rows ``R_i·u_i``. ``True``: directions form a Haar ``m``-frame (sign-fixed QR,
        :func:`~rfkit.estimators.orthogonal_projection`) and the radii are independent draws of the
        radial law, so every row is marginally ``Ω`` (Performer F.4, Eq 53).
    size : int, optional
        Number of independent matrices; the result then has shape ``(size, m, d)``.

    Notes
    -----
    Cost ``O(m d)`` per matrix for iid rows, ``O(m² d)`` for a Haar frame. Randomness: ``rng`` only.
    """
    law = _check_law(law)
    m = check_positive_int(m, "m")
    rng = check_rng(rng)
    d = law.d
    if orthogonal and m > d:
        raise ValueError(f"orthogonal rows need m <= d (Eq 39), got m={m}, d={d}")
    lead = () if size is None else (check_positive_int(size, "size"),)
    if orthogonal:
        directions = orthogonal_projection(m, d, rng=rng, norms="unit", size=size)
    else:
        g = gaussian_projection(m, d, rng=rng, size=size)
        directions = g / np.linalg.norm(g, axis=-1, keepdims=True)
    return directions * law.sample_radii(lead + (m,), rng)[..., None]


def beautiful_terms(z, g: Maclaurin, law: IsotropicLaw, m: int, *, rng, orthogonal: bool = False,
                    size: int | None = None) -> np.ndarray:
    r"""The terms ``X_i = g(ω_iᵀz)``, ``i = 1..m``, of one (or ``size``) estimates of ``F_{Ω,g}(z)``.

    Returns an array of shape ``(m,)`` (or ``(size, m)``). See :func:`beautiful_estimate`.
    """
    g = _check_g(g)
    law = _check_law(law)
    z = as_float_array(z, "z", ndim=1)
    if z.shape[0] != law.d:
        raise ValueError(f"z must have length law.d = {law.d}, got {z.shape[0]}")
    omega = beautiful_projections(law, m, rng=rng, orthogonal=orthogonal, size=size)
    return g(omega @ z)


def beautiful_estimate(z, g: Maclaurin, law: IsotropicLaw, m: int, *, rng, orthogonal: bool = False,
                       size: int | None = None) -> np.ndarray:
    r"""Monte Carlo estimate of the beautiful function ``F_{Ω,g}(z)``: ``F̂^iid_m`` or ``F̂^ort_m``.

    Parameters
    ----------
    z : array_like, shape ``(d,)``
    g : Maclaurin
        The entire function with non-negative coefficients.
    law : IsotropicLaw
        ``Ω``; ``law.d`` must equal ``len(z)``.
    m : int
        Number of projections (``m <= d`` when ``orthogonal``).
    rng : numpy Generator or seed
    orthogonal : bool
        Orthogonal ensemble (Eq 39) instead of iid rows (Eq 38).
    size : int, optional
        Number of independent estimates (shape ``(size,)``); a scalar array otherwise.

    Returns
    -------
    ndarray
        ``(1/m) Σ_i g(ω_iᵀz)``.

    Notes
    -----
    .. math::  \hat F^{iid}_m(z) = \frac1m \sum_{i=1}^m g(ω_i^{iid\,⊤} z),\qquad
               \hat F^{ort}_m(z) = \frac1m \sum_{i=1}^m g(ω_i^{ort\,⊤} z)

    (Performer Eqs 38-39). Both are unbiased because every ``ω_i`` is marginally ``Ω``. Cost ``O(m d)``
    per estimate plus sampling (``O(m² d)`` for the Haar frame). Randomness: ``rng`` only.

    References
    ----------
    Choromanski et al., "Rethinking Attention with Performers", ICLR 2021, App. F.4, Eqs 36-39.

    Examples
    --------
    With ``z = 0`` every estimate equals ``g(0) = a_0``:

    >>> float(beautiful_estimate(np.zeros(3), Maclaurin.exp(), IsotropicLaw(3), 2, rng=0))
    1.0
    """
    return beautiful_terms(z, g, law, m, rng=rng, orthogonal=orthogonal, size=size).mean(axis=-1)
