"""rfkit.gpu — the Torch execution backend (CUDA when present, CPU otherwise).

Torch is imported only when the backend is used (attributes load lazily); rfkit works without it.

What it offers
--------------
* Torch versions of the public estimators, for float32/float64 tensors on any device, differentiable
  (users train with them): the FAVOR+ feature maps (trig / positive / hyperbolic), ``iid`` and R-ORF projections
  drawn with a ``torch.Generator``, linear attention bidirectional and chunked-causal, exact softmax attention
  and FAVOR+ end to end (:mod:`rfkit.gpu.favor`); Macformer's random Maclaurin features, RMFA and its
  vectorised replicates given a draw (:mod:`rfkit.gpu.rmf`); practical and causal EVA with explicit or
  ``torch.Generator`` noise (:mod:`rfkit.gpu.eva`); RFA with every form, feature map and option of the numpy
  reference (:mod:`rfkit.gpu.rfa`); RA and LARA (Eq 34 proposals, Eq 9 weights) on the positive map
  (:mod:`rfkit.gpu.ra`, :mod:`rfkit.gpu.lara`).
* The namespace mirrors numpy's: ``rfkit.gpu.<module>.<name>`` is the torch execution of
  ``rfkit.estimators.<module>.<name>`` (projections, features, attention, favor, rmf, eva, rfa, ra, lara), with
  the numpy keyword names (``num_samples``, ``omega``, ``rng``: a ``torch.Generator`` or a numpy seed/generator,
  :func:`as_generator`); options the torch path does not execute raise ``NotImplementedError`` naming them.
* :func:`make_generator` / :func:`generator_from_rng` — torch randomness seeded from a seed or from a cell's
  numpy generator (itself seeded from the cell's ``SeedSequence``).

Design: an execution backend, not an array-API rewrite of the numpy modules
---------------------------------------------------------------------------
The numpy estimators are the reference, and they were not made namespace-generic. They are written for numpy's
memory and error model: in-place writes into preallocated buffers (``np.exp(x, out=x)``, block slices of one
output array), ``np.errstate`` to detect overflow exactly where it happens, numba kernels, ``np.tri`` masks.
An ``array_api_compat`` version would have to replace every one of these with out-of-place expressions (more
allocations on the numpy path, a change of its memory behaviour, which the complexity claims measure) and
would still need torch-only code for autograd-safe stabilisers (detached shifts) and for ``torch.Generator``
draws. So the torch path lives here as a *thin execution* of the same formulas:

* every torch function names the numpy function it executes and reuses that module's constants
  (``_SAFE_EXPONENT``, ``_RANK_ONE_SPREAD``, ``DEFAULT_CHUNK_SIZE``, ``NORM_LAWS``) and result types
  (:class:`~rfkit.estimators.attention.AttentionStats`), so thresholds and conventions have one source;
* parity tests (``tests/test_gpu_*.py``) pin the torch outputs to the numpy reference on identical draws
  (float64 to ~1e-10, float32 to ~1e-4 relative), bidirectional and causal, so the two cannot drift apart;
* ``torch.autograd.gradcheck`` checks the derivatives on tiny float64 inputs.

Where the data do not depend on the inputs, the numpy code is *called*, not re-executed: the Macformer draw
(:func:`rfkit.estimators.rmf.draw_rmf`) and its weights ``c_N``, EVA's partitions and causal masks, LARA's segment
bounds, RMFA's mask routes. Only the tensor algebra is torch's.

Scope and limits
----------------
Dense projections only (H/G-ORF operators stay numpy); FAVOR+ without the reproduction options of the numpy
``favor_attention`` (JAX stabiliser, denominator guard, ``renormalize=False``, scan/parallel causal forms);
RMFA with one shared draw; EVA with one sample per chunk and no ``EvaDetails``; RFA/RA/LARA on the positive map
(softmax forms; LARA with Eq 34 proposals and Eq 9 weights) and single ``(N, D)`` inputs. The roles
:func:`implementations` returns are exactly those whose claims these functions serve in full
(:mod:`rfkit.validation.backends`, the role table of ``rfkit validate --backend torch``, lists the ones left
out and why).
"""

from __future__ import annotations

import importlib

__all__ = [
    "TorchFeatures",
    "make_generator",
    "generator_from_rng",
    "as_generator",
    "default_device",
    "gaussian_projection",
    "orthogonal_projection",
    "draw_projection",
    "trig_features",
    "positive_features",
    "hyperbolic_features",
    "FEATURE_MAPS",
    "linear_attention",
    "softmax_attention",
    "favor_attention",
    "rmf_features",
    "rmfa",
    "rmfa_replicates",
    "eva_practical",
    "eva_causal",
    "rfa_attention",
    "ra_attention",
    "lara_attention",
]

_HOMES = {
    **dict.fromkeys(("TorchFeatures", "make_generator", "generator_from_rng", "as_generator", "default_device"),
                    "_core"),
    **dict.fromkeys(("gaussian_projection", "orthogonal_projection"), "projections"),
    **dict.fromkeys(("trig_features", "positive_features", "hyperbolic_features", "FEATURE_MAPS"), "features"),
    **dict.fromkeys(("linear_attention", "softmax_attention"), "attention"),
    **dict.fromkeys(("draw_projection", "favor_attention"), "favor"),
    **dict.fromkeys(("rmf_features", "rmfa", "rmfa_replicates"), "rmf"),
    **dict.fromkeys(("eva_practical", "eva_causal"), "eva"),
    "rfa_attention": "rfa",
    "ra_attention": "ra",
    "lara_attention": "lara",
}


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'rfkit.gpu' has no attribute {name!r}")
    return getattr(importlib.import_module(f"rfkit.gpu.{_HOMES[name]}"), name)


def __dir__():
    return sorted(__all__)
