"""Linear attention from features (bidirectional and chunked causal) and exact softmax attention on torch
(:mod:`rfkit.estimators.attention`). Executed in :mod:`rfkit.gpu.favor`."""

from __future__ import annotations

from .favor import linear_attention, softmax_attention

__all__ = ["linear_attention", "softmax_attention"]
