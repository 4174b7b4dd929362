"""Validate third-party estimators: plug a user's callable into the claims that test its role.

Claims call the implementation of a *role* through ``ctx.impl(role, default)``; passing
``implementations={role: callable}`` to :func:`rfkit.validation.engine.validate` (or
``rfkit.validation.validate_implementation``) runs exactly the claims that use that role, with the
user's callable in place of rfkit's. Roles and the signatures they expect:

=========================  ====================================================================
role                       signature
=========================  ====================================================================
``feature_map.positive``   ``f(x (..., L, d), omega (m, d)) -> (..., L, r)`` array or ``Features``;
``feature_map.hyperbolic`` same (Performer Eq 5 layout: ``[f_1 block | f_2 block]``, the ``1/√m``
``feature_map.trig``       convention, so that ``φ(x)ᵀφ(y)`` estimates ``exp(xᵀy)``)
``linear_attention``       ``f(q_features, k_features, v (L, d_v), *, causal) -> (L, d_v)``; the features
                           are :class:`~rfkit.estimators.Features` (``.dense()`` gives ``(L, r)``)
``orthogonal_projection``  ``f(m, d, *, rng, size) -> (size, m, d)`` (rows marginally ``N(0, I_d)``)
``is_estimate``            ``f(values (R, S), *, log_weights (R, S)) -> (R,)``
``snis_estimate``          same
``effective_sample_size``  ``f(*, weights (S,)) -> float``
``beautiful.terms``        ``f(z (d,), g, law, m, *, rng, orthogonal, size) -> (size, m)``: terms ``g(ω_iᵀz)``
=========================  ====================================================================

Every other role is named after the rfkit function it replaces and takes the same arguments
(``favor_attention``, ``favor_from_features``, ``favor_features``, ``generalized_features``,
``template_features``, ``softmax_attention``, ``prefix_sum_states``, ``parallel_prefix_scan``,
``hadamard_projection``, ``givens_projection``, ...). :func:`known_roles` lists the roles the registered
claims use.

Torch callables are wrapped by :func:`adapt` (``backend="torch"``): numpy arrays go in as float64 tensors
(on ``device``) and tensors come back as numpy arrays, so every check runs unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

__all__ = ["known_roles", "adapt"]


def known_roles() -> tuple[str, ...]:
    """Every role some registered claim calls through ``ctx.impl`` (the claims' ``roles``)."""
    from rfkit.validation.claims import all_claims

    return tuple(sorted({role for claim in all_claims() for role in claim.roles}))


def _to_torch(obj, torch, device):
    if isinstance(obj, np.ndarray) and obj.dtype != np.bool_:  # boolean masks are structure: they stay numpy
        return torch.as_tensor(obj, dtype=torch.float64, device=device)
    return obj


def _to_numpy(obj, torch):
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().numpy()
    if isinstance(obj, tuple):
        return tuple(_to_numpy(o, torch) for o in obj)
    return obj


def adapt(fn: Callable, *, backend: str = "numpy", device: str = "cpu") -> Callable:
    """Wrap ``fn`` so that it takes and returns numpy arrays.

    ``backend="numpy"`` returns ``fn`` unchanged; ``backend="torch"`` converts array arguments to float64
    tensors on ``device`` and tensor results back to numpy (generators, scalars and boolean masks pass through).
    """
    if backend == "numpy":
        return fn
    if backend != "torch":
        raise ValueError(f"unknown backend {backend!r}; expected 'numpy' or 'torch'")
    import torch

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        args = [_to_torch(a, torch, device) for a in args]
        kwargs = {k: _to_torch(v, torch, device) for k, v in kwargs.items()}
        return _to_numpy(fn(*args, **kwargs), torch)

    return wrapped
