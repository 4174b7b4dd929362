"""The softmax-kernel random feature maps on torch (:mod:`rfkit.estimators.features`): trigonometric, positive and
hyperbolic, as :class:`~rfkit.gpu.TorchFeatures`. Executed in :mod:`rfkit.gpu.favor`."""

from __future__ import annotations

from .favor import FEATURE_MAPS, hyperbolic_features, positive_features, trig_features

__all__ = ["trig_features", "positive_features", "hyperbolic_features", "FEATURE_MAPS"]
