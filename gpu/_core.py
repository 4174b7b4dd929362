"""Tensor plumbing shared by the torch estimators: input validation, dtypes, generators, factored features.

Nothing here is a formula; the formulas live in the modules that use these helpers.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from rfkit.base import checks as base_checks
from rfkit.base.checks import NumericalError, real_array
from rfkit.estimators import Features

__all__ = ["TorchFeatures", "as_torch_features", "as_tensor", "all_finite", "check_finite", "torch_dtype",
           "numpy_dtype", "default_device", "make_generator", "generator_from_rng", "as_generator", "check_qkv"]

_DTYPES = {torch.float64: np.dtype(np.float64), torch.float32: np.dtype(np.float32)}


def default_device() -> torch.device:
    """``cuda`` when available, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def torch_dtype(dtype) -> torch.dtype:
    """The torch computation dtype for ``dtype`` (a torch or numpy float64/float32 spec)."""
    if isinstance(dtype, torch.dtype):
        if dtype not in _DTYPES:
            raise TypeError(f"dtype must be float64 or float32, got {dtype}")
        return dtype
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"dtype must be float64 or float32, got {dtype!r}") from exc
    for tdt, ndt in _DTYPES.items():
        if dt == ndt:
            return tdt
    raise TypeError(f"dtype must be float64 or float32, got {dt}")


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """The numpy dtype of a torch float64/float32 dtype (keys of the numpy modules' constant tables)."""
    return _DTYPES[torch_dtype(dtype)]


def all_finite(t: torch.Tensor) -> bool:
    """Whether every entry of ``t`` is finite, in one reduction where it is: a NaN or an infinity makes the sum
    non-finite, so a finite sum settles it; only a non-finite sum (a bad entry, or finite entries whose sum
    overflows) takes the entrywise test. ``torch.isfinite(t).all()`` makes three passes and two boolean tensors of
    ``t``'s size, which on a CPU cost more than the products they guard (FAVOR+ validates its inputs and output)."""
    with torch.no_grad():
        return bool(torch.isfinite(t.sum())) or bool(torch.isfinite(t).all())


def check_finite(**tensors: torch.Tensor) -> None:
    """Raise ``ValueError`` naming the first of ``tensors`` with a NaN or an infinity (as :func:`as_tensor` does).

    One reduction per tensor and one transfer to the host for all of them: on CUDA each host read waits for the
    device, so validating FAVOR+'s inputs one by one cost a round trip each."""
    if not tensors:
        return
    with torch.no_grad():
        sums = torch.stack([t.sum().to(torch.float64) for t in tensors.values()])
        if bool(torch.isfinite(sums).all()):
            return
        for name, t in tensors.items():
            if not bool(torch.isfinite(t).all()):
                raise ValueError(f"{name} contains {int((~torch.isfinite(t)).sum())} non-finite value(s) (nan or inf)")


def as_tensor(x, name: str, *, dtype=None, device=None, min_ndim: int = 0, ndim: int | None = None,
              allow_nonfinite: bool = False) -> torch.Tensor:
    """Validate ``x`` and return it as a floating tensor (no copy when it already fits; autograd kept).

    ``dtype=None`` keeps a float32/float64 tensor's dtype (other inputs become float64); ``device=None``
    keeps a tensor's device (other inputs go to :func:`default_device`). Raises ``TypeError`` for
    non-real inputs and ``ValueError`` for a wrong number of dimensions or non-finite entries.
    """
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(real_array(x, name))
    if t.is_complex() or t.dtype == torch.bool:
        raise TypeError(f"{name} must hold real numbers, got dtype {t.dtype}")
    if dtype is None:
        dtype = t.dtype if t.dtype in _DTYPES else torch.float64
    target = torch_dtype(dtype)
    if ndim is not None and t.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(t.shape)}")
    if t.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimension(s), got shape {tuple(t.shape)}")
    if device is None:
        device = t.device if isinstance(x, torch.Tensor) else default_device()
    t = t.to(device=device, dtype=target)
    if not allow_nonfinite:
        check_finite(**{name: t})
    return t


def check_qkv(q, k, v, dtype=None, **checks):
    """:func:`rfkit.base.checks.check_qkv` for tensors: ``k`` and ``v`` take ``q``'s dtype and device."""
    q = as_tensor(q, "q", dtype=dtype)
    return base_checks.check_qkv(q, k, v, functools.partial(as_tensor, dtype=q.dtype, device=q.device), **checks)


def make_generator(seed: int, device=None) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with ``seed``."""
    gen = torch.Generator(device=torch.device(device) if device is not None else default_device())
    gen.manual_seed(int(seed))
    return gen


def generator_from_rng(rng, device=None) -> torch.Generator:
    """A ``torch.Generator`` seeded by one draw from a numpy ``rng`` (a cell's ``ctx.rng``, itself seeded from
    the cell's ``SeedSequence``), so torch randomness is reproducible from the same root seed."""
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    return make_generator(int(rng.integers(0, 2**63 - 1)), device)


def _same_device(a: torch.device, b: torch.device) -> bool:
    """Same device type and, where both name one, the same index (``cuda`` means the current CUDA device)."""
    if a.type != b.type:
        return False
    if a.type == "cuda" and (a.index is None or b.index is None):
        current = torch.cuda.current_device()
        return (current if a.index is None else a.index) == (current if b.index is None else b.index)
    return a.index == b.index or a.index is None or b.index is None


def as_generator(rng, device=None) -> torch.Generator:
    """The ``rng=`` of every torch function, as a ``torch.Generator`` on ``device`` (the device of the tensors the
    draws go to): the one helper every random draw in :mod:`rfkit.gpu` takes its generator from.

    * a ``torch.Generator`` already on ``device`` (or ``device=None``): itself;
    * a ``torch.Generator`` on another device (a CPU generator driving CUDA tensors): a new generator on ``device``
      seeded with one 62-bit draw from it, so the run stays reproducible from the caller's generator (torch refuses
      a generator on another device: "Expected a 'cuda' device type for generator but found 'cpu'");
    * anything numpy's ``rng`` accepts (a seed, a ``numpy.random.Generator``): one draw seeds a new generator on
      ``device`` (:func:`generator_from_rng`; ``device=None``: :func:`default_device`).
    """
    if rng is None:
        raise TypeError("rng must be a torch.Generator, a seed or a numpy Generator, got None")
    if isinstance(rng, torch.Generator):
        if device is None or _same_device(rng.device, torch.device(device)):
            return rng
        seed = int(torch.randint(0, 2**62, (1,), generator=rng, device=rng.device))
        return make_generator(seed, device)
    return generator_from_rng(rng, device)


@dataclass(frozen=True)
class TorchFeatures:
    """Feature matrix in factored form, as :class:`rfkit.estimators.Features`, holding tensors:
    ``φ(x_i) = values[..., i, :] · exp(log_scale[..., i])``."""

    values: torch.Tensor
    log_scale: torch.Tensor

    def __post_init__(self):
        if self.values.ndim < 2 or tuple(self.log_scale.shape) != tuple(self.values.shape[:-1]):
            raise ValueError(f"TorchFeatures: log_scale shape {tuple(self.log_scale.shape)} must equal values "
                             f"shape {tuple(self.values.shape)} without its last axis")

    @classmethod
    def plain(cls, values: torch.Tensor) -> TorchFeatures:
        return cls(values, torch.zeros(values.shape[:-1], dtype=values.dtype, device=values.device))

    @classmethod
    def from_numpy(cls, features: Features, device=None, dtype=None) -> TorchFeatures:
        """Move numpy :class:`~rfkit.estimators.Features` to tensors."""
        values = as_tensor(features.values, "features.values", dtype=dtype, device=device, allow_nonfinite=True)
        log_scale = as_tensor(features.log_scale, "features.log_scale", dtype=values.dtype, device=values.device,
                              allow_nonfinite=True)
        return cls(values, log_scale)

    def to_numpy(self) -> Features:
        return Features(self.values.detach().cpu().numpy(), self.log_scale.detach().cpu().numpy())

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    def dense(self) -> torch.Tensor:
        """The feature matrix itself; raises :class:`NumericalError` if it overflows."""
        out = self.values * torch.exp(self.log_scale)[..., None]
        if not all_finite(out):
            raise NumericalError("feature values overflow; keep them factored (see TorchFeatures)")
        return out


def as_torch_features(f, name: str, *, dtype=None, device=None) -> TorchFeatures:
    """Accept :class:`TorchFeatures`, numpy :class:`Features` or a plain ``(..., L, r)`` array/tensor."""
    if isinstance(f, TorchFeatures):
        values = as_tensor(f.values, f"{name}.values", dtype=dtype, device=device, allow_nonfinite=True)
        return TorchFeatures(values, f.log_scale.to(device=values.device, dtype=values.dtype))
    if isinstance(f, Features):
        return TorchFeatures.from_numpy(f, device=device, dtype=dtype)
    return TorchFeatures.plain(as_tensor(f, name, dtype=dtype, device=device, min_ndim=2, allow_nonfinite=True))
