r"""FAVOR+ on torch tensors: projections drawn with a ``torch.Generator``, the softmax-kernel feature maps, linear
attention (bidirectional and chunked causal), exact softmax attention and FAVOR+ end to end.

Every function is the torch execution of the numpy reference named in its docstring, with the same formula,
the same factored stabilisation (:class:`~rfkit.gpu.TorchFeatures`: a row's ``log_scale`` is never
exponentiated) and the same thresholds (imported from the numpy modules, not restated). Parity with the numpy
reference on identical draws is tested in ``tests/test_gpu_favor.py``. Operations are out-of-place so that
autograd flows through every estimate; stabilising shifts are detached (they cancel exactly, so the gradient
is unchanged).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from rfkit.base.checks import (
    NonPositiveDenominatorWarning,
    NumericalError,
    check_choice,
    check_positive_int,
)
from rfkit.estimators.attention import _RANK_ONE_SPREAD, DEFAULT_CHUNK_SIZE, AttentionStats
from rfkit.estimators.favor import _heads_per_block
from rfkit.estimators.features import _SAFE_EXPONENT
from rfkit.estimators.projections import NORM_LAWS

from ._core import (
    TorchFeatures,
    all_finite,
    as_generator,
    as_tensor,
    as_torch_features,
    check_finite,
    numpy_dtype,
    torch_dtype,
)

# Public here: the functions of rfkit.estimators.favor. The projections, feature maps and attention functions
# executed below are public in rfkit.gpu.projections, rfkit.gpu.features and rfkit.gpu.attention (the numpy homes).
__all__ = ["draw_projection", "favor_attention"]

# ------------------------------------------------------------------------------------ projections


def _lead(size: int | None) -> tuple[int, ...]:
    return () if size is None else (check_positive_int(size, "size"),)


def _standard_normal(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Draws always in float64 (as the numpy samplers), cast by the caller."""
    return torch.randn(shape, generator=generator, device=generator.device, dtype=torch.float64)


def gaussian_projection(m: int, d: int, *, rng, size: int | None = None, dtype=torch.float64) -> torch.Tensor:
    """Rows iid ``N(0, I_d)``, shape ``(m, d)`` (or ``(size, m, d)``): torch version of
    :func:`rfkit.estimators.gaussian_projection`. Randomness: ``rng`` only (a ``torch.Generator``, whose device is
    used, or a numpy seed/generator: :func:`~rfkit.gpu._core.as_generator`)."""
    m, d = check_positive_int(m, "m"), check_positive_int(d, "d")
    return _standard_normal(_lead(size) + (m, d), as_generator(rng)).to(torch_dtype(dtype))


#: At most this many matrices are factored on the host when the draw is on CUDA: torch's batched Householder QR
#: there runs one matrix per thread block, column by column, so a few small matrices take long (4 of 64×64 in
#: float64: 1.27 ms on an H200, against 0.45 ms through the host, copies included; 2026-11-28), while many matrices
#: share the device's multiprocessors.
HOST_QR_BATCH = 16


def _haar_frame(d: int, k: int, generator: torch.Generator, lead: tuple[int, ...]) -> torch.Tensor:
    """``k <= d`` Haar-orthonormal rows: sign-fixed thin QR of a ``d×k`` Gaussian (Mezzadri 2007). The Gaussian is
    drawn on the generator's device; a small batch of CUDA matrices is factored on the host (:data:`HOST_QR_BATCH`)."""
    g = _standard_normal(lead + (d, k), generator)
    host = g.is_cuda and math.prod(lead) <= HOST_QR_BATCH
    q, r = torch.linalg.qr(g.cpu() if host else g)
    signs = torch.where(torch.diagonal(r, dim1=-2, dim2=-1) < 0, -1.0, 1.0)
    return (q * signs[..., None, :]).mT.to(g.device)


def _radial(shape: tuple[int, ...], d: int, norms: str, generator: torch.Generator) -> torch.Tensor:
    """Row norms: ``chi`` as ``‖g‖`` for ``g ~ N(0, I_d)`` (a chi(d) draw), ``sqrt_d`` or ``unit`` constants."""
    if norms == "chi":
        return torch.linalg.vector_norm(_standard_normal(shape + (d,), generator), dim=-1)
    value = math.sqrt(d) if norms == "sqrt_d" else 1.0
    return torch.full(shape, value, dtype=torch.float64, device=generator.device)


def orthogonal_projection(m: int, d: int, *, rng, norms: str = "chi",
                          size: int | None = None, dtype=torch.float64) -> torch.Tensor:
    """Orthogonal random features (R-ORF): torch version of :func:`rfkit.estimators.orthogonal_projection`.

    Haar-orthonormal directions in blocks of ``d`` rows (``⌈m/d⌉`` independent blocks, the last partial) and
    independent row norms (``chi``: each row marginally ``N(0, I_d)``; ``sqrt_d``; ``unit``). Shape ``(m, d)``
    or ``(size, m, d)``. Cost ``O(m d²)``. Randomness: ``rng`` only (as :func:`gaussian_projection`).
    """
    m, d = check_positive_int(m, "m"), check_positive_int(d, "d")
    norms = check_choice(norms, "norms", NORM_LAWS)
    generator = as_generator(rng)
    lead = _lead(size)
    full, rest = divmod(m, d)
    parts = []
    if full:
        parts.append(_haar_frame(d, d, generator, lead + (full,)).reshape(lead + (full * d, d)))
    if rest:
        parts.append(_haar_frame(d, rest, generator, lead))
    directions = torch.cat(parts, dim=-2)
    return (directions * _radial(lead + (m,), d, norms, generator)[..., None]).to(torch_dtype(dtype))


#: Samplers by :func:`draw_projection` name.
PROJECTIONS = {"iid": gaussian_projection, "orthogonal": orthogonal_projection}


def draw_projection(kind: str, m: int, d: int, *, rng, dtype=torch.float64) -> torch.Tensor:
    """``W`` (``m×d``) by sampler name, ``iid`` or ``orthogonal`` (chi norms): the dense samplers of
    :func:`rfkit.estimators.favor.draw_projection`."""
    kind = check_choice(kind, "projection", PROJECTIONS)
    return PROJECTIONS[kind](m, d, rng=rng, dtype=dtype)


# --------------------------------------------------------------------------------------- features


def _operator_matrix(omega):
    """A projection operator (``apply(x) = x Wᵀ``: H/G-ORF, or a claim's stacked per-replicate rows) as its dense
    matrix ``W = apply(I_d)ᵀ``; arrays and tensors pass unchanged."""
    if not hasattr(omega, "apply"):
        return omega
    return np.swapaxes(omega.apply(np.eye(omega.d)), -1, -2)


def _project(x, omega, dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x, x Wᵀ, W)`` (a 1-D ``x`` becomes one row; ``W`` as a tensor, ``(m, d)`` or a stack ``(..., m, d)``
    broadcast against ``x``'s leading axes). An operator (an H/G-ORF projection, or any object with ``apply``) is
    used as its dense matrix (:func:`_operator_matrix`): the same ``W``, applied by one matrix product instead of
    the numpy reference's fast transforms."""
    omega = _operator_matrix(omega)
    x = as_tensor(x, "x", dtype=dtype, min_ndim=1)
    if x.ndim == 1:
        x = x[None, :]
    omega = as_tensor(omega, "omega", dtype=x.dtype, device=x.device, min_ndim=2)  # (m, d) or stacked (..., m, d)
    if x.shape[-1] != omega.shape[-1]:
        raise ValueError(f"x and omega must share their last dimension, got {x.shape[-1]} and {omega.shape[-1]}")
    return x, x @ omega.mT, omega


def _half_sq_norm(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (x * x).sum(dim=-1)


def _projection_bound(x: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
    """Cauchy-Schwarz bound ``‖x_i‖·max_j ‖ω_j‖`` of ``max_j |ω_jᵀx_i|`` (the numpy reference's bound)."""
    with torch.no_grad():
        return torch.sqrt(4.0 * _half_sq_norm(x) * _half_sq_norm(omega).max())


def _unstabilized(values: torch.Tensor) -> TorchFeatures:
    if not all_finite(values):
        raise NumericalError("unstabilized features overflow; use stabilize=True")
    return TorchFeatures.plain(values)


def _exp_rows(log_phi: torch.Tensor, row_offset: torch.Tensor, stabilize: bool,
              row_bound: torch.Tensor) -> TorchFeatures:
    """Features ``exp(log_phi - row_offset)``, as :func:`rfkit.estimators.features._exp_rows`: rows whose bound
    exceeds the dtype's safe exponent move their maximum into ``log_scale`` (per row, so causal-safe).

    ``log_phi`` is a fresh product (the projection, or its concatenation with its negative) that nothing else holds,
    so the shift and the exponent overwrite it in place: two fewer ``(..., L, r)`` tensors, each of which cost more
    to allocate and first touch on a CPU than the ``exp`` itself. Autograd allows both (a matrix product's and a
    concatenation's backward do not read their output; ``exp_`` saves its result)."""
    if stabilize:
        unsafe = row_bound > _SAFE_EXPONENT[numpy_dtype(log_phi.dtype)]
        if bool(unsafe.any()):
            shift = torch.where(unsafe, log_phi.detach().amax(dim=-1), 0.0)
            log_phi.sub_(shift[..., None])
            row_offset = row_offset - shift
        return TorchFeatures(log_phi.exp_(), -row_offset)
    values = log_phi.sub_(row_offset[..., None]).exp_()
    if bool((values == 0).any()):
        raise NumericalError("unstabilized positive features underflow to 0; use stabilize=True")
    return _unstabilized(values)


def trig_features(x, omega, *, stabilize: bool = True, dtype=None) -> TorchFeatures:
    r"""Trigonometric features ``exp(‖x‖²/2)/√m·[sin(Wx), cos(Wx)]`` (Performer Sec 2.3), ``r = 2m``.

    Torch version of :func:`rfkit.estimators.trig_features`: ``x`` ``(..., L, d)`` (or ``(d,)``), ``omega``
    ``(m, d)``; ``dtype=None`` keeps a float32/float64 tensor's dtype. Cost ``O(Lmd)``; no randomness.
    """
    return _trig(*_project(x, omega, dtype), stabilize)


def _trig(x: torch.Tensor, proj: torch.Tensor, omega: torch.Tensor, stabilize: bool) -> TorchFeatures:
    values = torch.cat([torch.sin(proj), torch.cos(proj)], dim=-1)
    log_scale = _half_sq_norm(x) - 0.5 * math.log(omega.shape[-2])
    if stabilize:
        return TorchFeatures(values, log_scale)
    return _unstabilized(values * torch.exp(log_scale)[..., None])


def positive_features(x, omega, *, stabilize: bool = True, dtype=None) -> TorchFeatures:
    r"""Positive features ``exp(ω_iᵀx - ‖x‖²/2)/√m`` (FAVOR+, Performer Lemma 1), ``r = m``.

    Torch version of :func:`rfkit.estimators.positive_features`; cost ``O(Lmd)``; no randomness.
    """
    return _positive(*_project(x, omega, dtype), stabilize)


def _positive(x: torch.Tensor, proj: torch.Tensor, omega: torch.Tensor, stabilize: bool) -> TorchFeatures:
    return _exp_rows(proj, _half_sq_norm(x) + 0.5 * math.log(omega.shape[-2]), stabilize, _projection_bound(x, omega))


def hyperbolic_features(x, omega, *, stabilize: bool = True, dtype=None) -> TorchFeatures:
    r"""Hyperbolic features ``exp(±ω_iᵀx - ‖x‖²/2)/√(2m)`` (Performer Lemma 1, SM^hyp+), ``r = 2m``.

    Torch version of :func:`rfkit.estimators.hyperbolic_features`; cost ``O(Lmd)``; no randomness.
    """
    return _hyperbolic(*_project(x, omega, dtype), stabilize)


def _hyperbolic(x: torch.Tensor, proj: torch.Tensor, omega: torch.Tensor, stabilize: bool) -> TorchFeatures:
    log_phi = torch.cat([proj, -proj], dim=-1)
    return _exp_rows(log_phi, _half_sq_norm(x) + 0.5 * math.log(2 * omega.shape[-2]), stabilize,
                     _projection_bound(x, omega))


#: Named softmax-kernel feature maps (the keys of :data:`rfkit.estimators.FEATURE_MAPS`).
FEATURE_MAPS = {"trig": trig_features, "positive": positive_features, "hyperbolic": hyperbolic_features}
#: Their formulas on validated tensors ``(x, x Wᵀ, W, stabilize)``: what :func:`favor_attention` calls once it has
#: checked its inputs (the maps above check theirs, a host round trip each on CUDA).
_FEATURE_FORMULAS = {"trig": _trig, "positive": _positive, "hyperbolic": _hyperbolic}

# ------------------------------------------------------------------------------------- attention


def _with_ones(v: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """``[w·V, w]`` (``w = 1`` by default): one product then yields numerator and denominator."""
    if weights is None:
        return torch.cat([v, torch.ones(v.shape[:-1] + (1,), dtype=v.dtype, device=v.device)], dim=-1)
    weighted = v * weights[..., None]
    return torch.cat([weighted, weights[..., None].expand(weighted.shape[:-1] + (1,))], dim=-1)


def _causal_scan(qf: TorchFeatures, kf: TorchFeatures, v: torch.Tensor, chunk: int, start: int = 0,
                 carry: tuple[torch.Tensor, torch.Tensor] | None = None):
    """Chunked causal prefix sums: :func:`rfkit.estimators.attention._causal_scan` step for step (row ``i``'s
    keys weighted by ``exp(kls_j - max_{j'<=i} kls_j')``, rank-one inside a chunk, outliers added exactly).

    ``start`` and ``carry`` continue a scan: the rows from ``start`` (a multiple of ``chunk``) only, with
    ``carry = (state, c)`` the keys before ``start`` summed as ``Σ_j e^{kls_j - c} [v_j, 1] k'_jᵀ`` (``c >=`` each
    ``kls_j``; shape ``(..., r, d_v + 1)`` and ``(..., 1)``)."""
    qv, kv = qf.values, kf.values
    lead = torch.broadcast_shapes(qv.shape[:-2], kv.shape[:-2], v.shape[:-2])
    n = qv.shape[-2]
    kls = kf.log_scale.detach().expand(lead + (n,))
    kls_grad = kf.log_scale.expand(lead + (n,))
    tri = torch.ones(chunk, chunk, dtype=qv.dtype, device=qv.device).tril()
    spread_limit = _RANK_ONE_SPREAD[numpy_dtype(qv.dtype)]
    blocks, refs = [], []
    state, c = carry if carry is not None else (None, None)
    for s in range(start, n, chunk):
        e = min(s + chunk, n)
        ls, ls_grad, mask = kls[..., s:e], kls_grad[..., s:e], tri[: e - s, : e - s]
        running = torch.cummax(ls, dim=-1).values
        if c is not None:
            running = torch.maximum(running, c)
        ref0 = running[..., :1]
        vo = _with_ones(v[..., s:e, :])
        masked = (qv[..., s:e, :] @ kv[..., s:e, :].mT) * mask
        outlier = ls - ref0 > spread_limit
        gap = torch.where(outlier, -math.inf, ls_grad - ref0)
        block = (masked @ (vo * torch.exp(gap)[..., None])) * torch.exp(ref0 - running)[..., None]
        if bool(outlier.any()):
            expo = torch.where(outlier[..., None, :] & (mask > 0), ls_grad[..., None, :] - running[..., :, None],
                               -math.inf)
            block = block + (masked * torch.exp(expo)) @ vo
        if state is not None:
            block = block + (qv[..., s:e, :] @ state) * torch.exp(c - running)[..., None]
        blocks.append(block)
        refs.append(running)
        top = ls.amax(dim=-1, keepdim=True)
        c_new = top if c is None else torch.maximum(c, top)
        update = ((vo * torch.exp(ls_grad - c_new)[..., None]).mT @ kv[..., s:e, :]).mT
        state = update if state is None else state * torch.exp(c - c_new)[..., None] + update
        c = c_new
    return torch.cat(blocks, dim=-2), torch.cat(refs, dim=-1)


def _chunked(x: torch.Tensor, n: int, chunk: int, fill: float) -> torch.Tensor:
    """``x (..., n, w)`` padded with ``fill`` to whole chunks and viewed ``(..., n_chunks, chunk, w)``."""
    pad = (-n) % chunk
    if pad:
        x = torch.cat([x, x.new_full(x.shape[:-2] + (pad, x.shape[-1]), fill)], dim=-2)
    return x.reshape(x.shape[:-2] + ((n + pad) // chunk, chunk, x.shape[-1]))


def _causal_parallel(qf: TorchFeatures, kf: TorchFeatures, v: torch.Tensor, chunk: int):
    r"""Chunk-parallel causal prefix sums (the chunk mode of linear-attention kernels), the same buffers as
    :func:`_causal_scan` without its loop over chunks: a few batched products whatever the length.

    With ``a_j`` the key log-scales, ``r_i = max_{j<=i} a_j`` (the rows' references, as in the scan), chunk ``b``'s
    maximum ``c_b`` and ``U_b = Σ_{j∈b} e^{a_j - c_b} k'_j [v_j, 1]ᵀ``, row ``i`` of chunk ``k`` is

        ``Σ_{j<=i, j∈k} e^{a_j - r_i} (q'_i·k'_j) [v_j, 1]  +  e^{c_0 - r_i} q'_i T_{k-1}``,
        ``T_{k-1} = Σ_{b<k} e^{c_b - c_0} U_b`` (one cumulative sum over chunks).

    Every weight inside a chunk is ``<= 1``; across chunks the first chunk's maximum ``c_0`` is the shift, which
    is exact while ``c_b - c_0`` stays within :data:`~rfkit.estimators.attention._RANK_ONE_SPREAD`. From the first
    chunk ``b*`` beyond it, the rows after chunk ``b*`` are scanned (:func:`_causal_scan`, carrying ``T_{b*}``
    rescaled to ``max_{b<=b*} c_b``); the rows of chunks ``<= b*`` keep the formula above, whose terms read chunks
    before ``b*`` only. Which formula a row takes thus depends on the chunks before its own, and every batched
    product has the same shape whatever the data: a row's value, to the last bit, does not depend on later
    tokens. Its rounding may differ from the scan's."""
    qv, kv = qf.values, kf.values
    lead = torch.broadcast_shapes(qv.shape[:-2], kv.shape[:-2], v.shape[:-2])
    n = qv.shape[-2]
    kls = kf.log_scale.detach().expand(lead + (n,))
    running = torch.cummax(kls, dim=-1).values
    a = _chunked(kf.log_scale.expand(lead + (n,))[..., None], n, chunk, -math.inf)[..., 0]  # (..., C, chunk)
    top = a.detach().amax(dim=-1)  # c_b
    c0 = top[..., :1]
    q = _chunked(qv.expand(lead + qv.shape[-2:]), n, chunk, 0.0)
    k = _chunked(kv.expand(lead + kv.shape[-2:]), n, chunk, 0.0)
    vo = _chunked(_with_ones(v.expand(lead + v.shape[-2:])), n, chunk, 0.0)
    r = _chunked(running[..., None], n, chunk, 0.0)[..., 0]
    tri = torch.ones(chunk, chunk, dtype=torch.bool, device=qv.device).tril()
    inside = torch.exp(torch.where(tri, a[..., None, :] - r[..., :, None], -math.inf))
    buf = ((q @ k.mT) * inside) @ vo
    states = (k * torch.exp(a - top[..., None])[..., None]).mT @ vo  # U_b: (..., C, r, d_v + 1)
    limit = _RANK_ONE_SPREAD[numpy_dtype(qv.dtype)]
    # clamped: chunks beyond the limit (their rows are scanned below) stay finite, so no gradient meets an infinity
    shifted = torch.cumsum(states * torch.exp((top - c0).clamp(max=limit))[..., None, None], dim=-3)
    before = torch.cat([torch.zeros_like(shifted[..., :1, :, :]), shifted[..., :-1, :, :]], dim=-3)
    buf = buf + (q @ before) * torch.exp((c0[..., None] - r).clamp(max=0.0))[..., None]  # <= 0 past chunk 0
    buf = buf.reshape(lead + (-1, buf.shape[-1]))[..., :n, :]
    beyond = (top - c0).reshape(-1, top.shape[-1]).amax(dim=0) > limit
    first = int(torch.argmax(beyond.to(torch.uint8)))  # b*, or 0 (chunk 0 is never beyond) when none is
    start = (first + 1) * chunk
    if first == 0 or start >= n:
        return buf, running
    c_new = top[..., : first + 1].amax(dim=-1, keepdim=True)
    state = (shifted[..., first - 1, :, :] * torch.exp(c0 - c_new)[..., None]
             + states[..., first, :, :] * torch.exp(top[..., first : first + 1] - c_new)[..., None])
    tail, tail_refs = _causal_scan(qf, kf, v, chunk, start=start, carry=(state, c_new))
    return torch.cat([buf[..., :start, :], tail], dim=-2), torch.cat([running[..., :start], tail_refs], dim=-1)


#: Causal algorithms of :func:`linear_attention`: ``"scan"`` (a loop over chunks carrying the state; rows are
#: bit-for-bit independent of later tokens), ``"parallel"`` (:func:`_causal_parallel`: all chunks at once, one
#: cumulative sum of states; scans the chunks after the keys' scales spread too far; also bit-for-bit causal)
#: and ``"auto"`` (parallel on CUDA, where the scan's per-chunk kernel launches and host syncs dominate; the scan
#: elsewhere).
CAUSAL_ALGORITHMS = ("auto", "scan", "parallel")


def _buffers(qf: TorchFeatures, kf: TorchFeatures, v: torch.Tensor, causal: bool, chunk: int,
             algorithm: str = "auto"):
    """``[numerator | denominator]`` on a stabilised scale and ``log_ref`` (true = stabilised·e^{log_ref})."""
    if causal:
        parallel = algorithm == "parallel" or (algorithm == "auto" and qf.values.is_cuda)
        buf, key_ref = (_causal_parallel if parallel else _causal_scan)(qf, kf, v, chunk)
    else:
        key_ref = kf.log_scale.detach().amax(dim=-1, keepdim=True)
        weights = torch.exp(kf.log_scale - key_ref)
        buf = qf.values @ (kf.values.mT @ _with_ones(v, weights))
    return buf, qf.log_scale.detach() + key_ref


def _first_bad_row(bad: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.nonzero(bad)[0])


def _normalize(buf: torch.Tensor, log_ref: torch.Tensor, inputs: dict[str, torch.Tensor]):
    """Divide ``[num | den]``; a zero or non-finite renormaliser raises, ``D̂ <= 0`` warns (numpy semantics)."""
    num, den = buf[..., :-1], buf[..., -1]
    out = num / den[..., None]
    with torch.no_grad():  # the output's sum, the count of D̂ <= 0 and the least true D̂: one read from the device
        true_den = torch.sign(den) * torch.exp(torch.log(torch.abs(den)) + log_ref)
        total, nonpos, least = torch.stack([out.sum().to(torch.float64), (den <= 0).sum().to(torch.float64),
                                            true_den.min().to(torch.float64)]).tolist()
    if not math.isfinite(total) and not all_finite(out):
        for name, arr in inputs.items():
            if not all_finite(arr):
                raise ValueError(f"{name} contains non-finite values (nan or inf)")
        bad = ~torch.isfinite(out).all(dim=-1)
        raise NumericalError(f"{int(bad.sum())} attention row(s) have a zero or non-finite renormaliser "
                             f"(first at index {_first_bad_row(bad)}); the estimate is undefined there")
    nonpos = int(nonpos)
    stats = AttentionStats(least, nonpos, int(den.numel()))
    if nonpos:
        warnings.warn(f"{nonpos} of {den.numel()} renormalisers are <= 0 (min {stats.min_denominator:.3g}); "
                      "signed features make the estimate unstable", NonPositiveDenominatorWarning, stacklevel=3)
    return out, stats


def _check_attention_shapes(qf: TorchFeatures, kf: TorchFeatures, v: torch.Tensor, causal: bool) -> None:
    if qf.values.shape[-1] != kf.values.shape[-1]:
        raise ValueError(f"q_features and k_features must share their last dimension, got "
                         f"{qf.values.shape[-1]} and {kf.values.shape[-1]}")
    if kf.values.shape[-2] != v.shape[-2]:
        raise ValueError(f"k_features and v must have the same number of rows, got {kf.values.shape[-2]} and "
                         f"{v.shape[-2]}")
    if causal and qf.values.shape[-2] != kf.values.shape[-2]:
        raise ValueError(f"causal attention needs as many queries as keys, got N={qf.values.shape[-2]} and "
                         f"M={kf.values.shape[-2]}")


def linear_attention(q_features, k_features, v, *, causal: bool = False, chunk_size: int | None = None,
                     causal_algorithm: str = "auto", return_stats: bool = False, dtype=None):
    r"""Linear attention ``D̂⁻¹Q'((K')ᵀV)``, ``D̂ = diag(Q'((K')ᵀ1))`` (Performer Eq 4, Algorithm 1; Eq 11
    causally): torch version of :func:`rfkit.estimators.linear_attention`.

    Parameters
    ----------
    q_features, k_features : TorchFeatures, numpy Features, or array/tensor ``(..., L, r)``
    v : array or tensor ``(..., M, d_v)``
    causal : bool
        Chunked prefix sums (``chunk_size``, default :data:`~rfkit.estimators.attention.DEFAULT_CHUNK_SIZE`).
    causal_algorithm : {"auto", "scan", "parallel"}
        How the chunks are combined (:data:`CAUSAL_ALGORITHMS`): equal in exact arithmetic.
    return_stats : bool
        Also return :class:`~rfkit.estimators.attention.AttentionStats`.
    dtype : float64 or float32, optional
        Default: the query features' dtype. The device is the query features' device.

    Notes
    -----
    Cost ``O(L·r·d_v)`` bidirectional, plus ``O(L·chunk·(r + d_v))`` causal. No randomness.
    """
    qf = as_torch_features(q_features, "q_features", dtype=dtype)
    kf = as_torch_features(k_features, "k_features", dtype=qf.dtype, device=qf.values.device)
    v = as_tensor(v, "v", dtype=qf.dtype, device=qf.values.device, min_ndim=2, allow_nonfinite=True)
    _check_attention_shapes(qf, kf, v, causal)
    chunk = DEFAULT_CHUNK_SIZE if chunk_size is None else check_positive_int(chunk_size, "chunk_size")
    algorithm = check_choice(causal_algorithm, "causal_algorithm", CAUSAL_ALGORITHMS)
    buf, log_ref = _buffers(qf, kf, v, causal, chunk, algorithm)
    inputs = {"q_features": qf.values, "q_features.log_scale": qf.log_scale, "k_features": kf.values,
              "k_features.log_scale": kf.log_scale, "v": v}
    out, stats = _normalize(buf, log_ref, inputs)
    return (out, stats) if return_stats else out


def softmax_attention(q, k, v, *, scale: float | None = None, causal: bool = False, dtype=None) -> torch.Tensor:
    r"""Exact ``softmax(scale·QKᵀ)V`` with a row-wise shift taken after masking (torch version of
    :func:`rfkit.estimators.softmax_attention`; ``scale = 1/√d`` by default). Cost ``O(NMd)``, memory ``O(NM)``."""
    q = as_tensor(q, "q", dtype=dtype, min_ndim=2)
    k = as_tensor(k, "k", dtype=q.dtype, device=q.device, min_ndim=2)
    v = as_tensor(v, "v", dtype=q.dtype, device=q.device, min_ndim=2)
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not fit")
    n, m = q.shape[-2], k.shape[-2]
    if causal and n != m:
        raise ValueError(f"causal attention needs as many queries as keys, got N={n} and M={m}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    logits = (q @ k.mT) * scale
    if causal:
        attend = torch.ones(n, m, dtype=torch.bool, device=q.device).tril()
        logits = torch.where(attend, logits, -math.inf)
    weights = torch.exp(logits - logits.detach().amax(dim=-1, keepdim=True))
    return (weights @ v) / weights.sum(dim=-1, keepdim=True)


def favor_attention(q, k, v, *, kind: str = "positive", projection: str = "orthogonal", m: int = 256,
                    omega=None, rng=None, scale_inputs: bool = True,
                    causal: bool = False, chunk_size: int | None = None, causal_algorithm: str = "auto",
                    return_stats: bool = False, dtype=None):
    r"""FAVOR+ attention (Performer Algorithm 1): torch version of :func:`rfkit.estimators.favor.favor_attention`
    for dense projections.

    Parameters
    ----------
    q, k : array or tensor ``(..., L, d)``; v : ``(..., L, d_v)``
    kind : {"trig", "positive", "hyperbolic"}
    projection : {"iid", "orthogonal"}
        Sampler for ``W`` when ``omega`` is not given (chi norms; R-ORF by default).
    m : int
        Number of projections.
    omega : tensor ``(m, d)``, optional
        Explicit projection (then ``rng`` is not needed).
    rng : torch.Generator, seed or numpy Generator
        Randomness of the projection; required when it is drawn.
    scale_inputs : bool
        Use ``q/d^{1/4}``, ``k/d^{1/4}`` (Performer's ``A = exp(QKᵀ/√d)``).
    causal, chunk_size, causal_algorithm, return_stats
        As in :func:`linear_attention`.

    Notes
    -----
    Cost: features ``O(Lmd)``, buffers ``O(L·r·d_v)``.
    """
    kind = check_choice(kind, "kind", FEATURE_MAPS)
    q = as_tensor(q, "q", dtype=dtype, min_ndim=2, allow_nonfinite=True)
    k = as_tensor(k, "k", dtype=q.dtype, device=q.device, min_ndim=2, allow_nonfinite=True)
    v = as_tensor(v, "v", dtype=q.dtype, device=q.device, min_ndim=2, allow_nonfinite=True)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share their last dimension, got {q.shape[-1]} and {k.shape[-1]}")
    d = q.shape[-1]
    if omega is None:
        if rng is None:
            raise ValueError("favor_attention needs rng= to draw the projection (or an explicit omega)")
        omega = draw_projection(projection, m, d, rng=as_generator(rng, q.device), dtype=q.dtype)
    omega = as_tensor(_operator_matrix(omega), "omega", dtype=q.dtype, device=q.device, ndim=2, allow_nonfinite=True)
    if omega.shape[-1] != d:
        raise ValueError(f"x and omega must share their last dimension, got {d} and {omega.shape[-1]}")
    check_finite(q=q, k=k, v=v, omega=omega)
    scale = d ** -0.25 if scale_inputs else 1.0
    formula = _FEATURE_FORMULAS[kind]

    def attend(qb, kb, vb):
        qs, ks = qb * scale, kb * scale
        qf, kf = formula(qs, qs @ omega.mT, omega, True), formula(ks, ks @ omega.mT, omega, True)
        return linear_attention(qf, kf, vb, causal=causal, chunk_size=chunk_size, causal_algorithm=causal_algorithm,
                                return_stats=return_stats)

    lead = q.shape[:-2]
    if (causal or q.device.type != "cpu" or return_stats or not lead or k.shape[:-2] != lead
            or v.shape[:-2] != lead):
        return attend(q, k, v)
    # bidirectional on the CPU: independent heads in blocks (as rfkit.estimators.favor.favor_attention)
    heads = math.prod(lead)
    step = _heads_per_block(max(q.shape[-2], k.shape[-2]), 2 * omega.shape[0], q.element_size())
    if step >= heads:
        return attend(q, k, v)
    flat = [x.reshape((heads,) + tuple(x.shape[-2:])) for x in (q, k, v)]
    out = torch.cat([attend(*(x[s:s + step] for x in flat)) for s in range(0, heads, step)])
    return out.reshape(lead + out.shape[-2:])
