"""Random projections on torch (the dense samplers of :mod:`rfkit.estimators.projections`), drawn with ``rng``:
a ``torch.Generator`` or a numpy seed/generator. Executed in :mod:`rfkit.gpu.favor`."""

from __future__ import annotations

from .favor import gaussian_projection, orthogonal_projection

__all__ = ["gaussian_projection", "orthogonal_projection"]
