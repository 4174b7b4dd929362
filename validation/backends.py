"""The torch backend's implementations of the claims' roles (:func:`rfkit.validation.adapters.known_roles`).

This role table lives in :mod:`rfkit.validation` (it adapts :mod:`rfkit.gpu`'s functions to the claims'
calling conventions), so :mod:`rfkit.gpu` never imports the validation layer.

Each role callable takes and returns what the numpy role takes and returns (numpy arrays, numpy
:class:`~rfkit.estimators.Features`, numpy generators), so checks run unchanged: arrays travel through
:func:`rfkit.validation.adapters.adapt` (float64 tensors on ``device``), factored features are moved here,
and a role that draws passes the cell's numpy ``rng`` on (the torch functions take ``rng=`` as numpy's do and seed a
``torch.Generator`` from it, :func:`rfkit.gpu._core.as_generator`).

Roles left out on purpose: those that only complexity claims call (``favor_attention``,
``favor_from_features``, ``softmax_attention``: their checks measure numpy's time and ``tracemalloc`` memory,
which torch allocations do not report to), the structured (H/G-ORF) samplers, which stay numpy-only, and
``rmfa`` (its claims exercise per-head draw sharing and cost; :func:`rfkit.gpu.rmf.rmfa` shares one draw) and
``eva_practical`` (its claims read :class:`~rfkit.estimators.eva.EvaDetails` diagnostics, which the torch path
does not produce), and ``lara_attention`` (its claims exercise maps, proposal families and weights beyond the torch
path's positive-map form with Eq 34/Eq 9). ``rfa_attention`` runs on torch in every form numpy has
(tests/test_gpu_rfa_forms.py compares the two).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from rfkit.estimators import Features
from rfkit.estimators import ra as ra_reference
from rfkit.estimators.rmf import RMFAResult
from rfkit.gpu import attention, eva, features, projections, ra, rfa, rmf
from rfkit.gpu._core import TorchFeatures, as_generator
from rfkit.validation.adapters import adapt

__all__ = ["implementations"]


def _to_backend(obj, device):
    return TorchFeatures.from_numpy(obj, device=device) if isinstance(obj, Features) else obj


def _from_backend(obj):
    if isinstance(obj, TorchFeatures):
        return obj.to_numpy()
    return rmf.result_to_numpy(obj) if isinstance(obj, RMFAResult) else obj


def _role(fn: Callable, device: str) -> Callable:
    """``fn`` behind :func:`~rfkit.validation.adapters.adapt` with factored features converted both ways."""
    adapted = adapt(fn, backend="torch", device=device)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        args = [_to_backend(a, device) for a in args]
        kwargs = {k: _to_backend(v, device) for k, v in kwargs.items()}
        return _from_backend(adapted(*args, **kwargs))

    return call


def _orthogonal_projection(device: str):
    def sample(m, d, *, rng, norms="chi", size=None, dtype=np.float64):
        gen = as_generator(rng, device)
        return projections.orthogonal_projection(m, d, rng=gen, norms=norms, size=size, dtype=dtype).cpu().numpy()

    return sample


def _linear_attention(q_features, k_features, v, *, causal, chunk_size=None):
    return attention.linear_attention(q_features, k_features, v, causal=causal, chunk_size=chunk_size)


def _ra_attention(device: str) -> Callable:
    """RA on torch for the form the torch path implements (positive map, sampled evaluation, simplified
    integrand); other forms (feature maps, evaluation modes, the literal integrand, returned samples) run on the
    numpy reference, so claims that sweep them still compute a verdict."""
    on_torch = _role(ra.ra_attention, device)

    @functools.wraps(ra_reference.ra_attention)
    def call(q, k, v, *, feature_map="positive", eval_mode="sample", f_form="simplified", return_samples=False,
             **kwargs):
        if (feature_map, eval_mode, f_form, return_samples) == ("positive", "sample", "simplified", False):
            return on_torch(q, k, v, **kwargs)
        return ra_reference.ra_attention(q, k, v, feature_map=feature_map, eval_mode=eval_mode, f_form=f_form,
                                         return_samples=return_samples, **kwargs)

    return call


def implementations(device: str = "cpu") -> dict[str, Callable]:
    """``{role: callable}`` for every role the torch backend covers, computing on ``device``.

    The callables take and return numpy objects (see the module docstring); inputs become float64 tensors.
    """
    roles = {f"feature_map.{kind}": _role(fmap, device) for kind, fmap in features.FEATURE_MAPS.items()}
    roles["linear_attention"] = _role(_linear_attention, device)
    roles["orthogonal_projection"] = _orthogonal_projection(device)
    roles["rmf_features"] = _role(rmf.rmf_features, device)
    roles["rmfa_replicates"] = _role(rmf.rmfa_replicates, device)
    roles["eva_causal"] = _role(eva.eva_causal, device)
    roles["ra_attention"] = _ra_attention(device)
    roles["rfa_attention"] = _role(rfa.rfa_attention, device)
    return roles
