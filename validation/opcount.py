"""Counting operations exactly: how many exponentials a call evaluates.

A statement such as "requires exp(q_n·k_m) for every query-key pair" (EVA §3.2) is about an operation count, which a
count decides exactly where a CPU-time slope at finite sizes only approaches its order from below (fixed and linear
costs bend it) and follows the machine's load.

* :func:`exp_evaluations` — the number of values numpy's ``exp`` ufunc computes during one call (every element of
  every result), counted by wrapping ``numpy.exp`` for the duration of the call.

Validity: the count sees exponentials evaluated through ``numpy.exp`` (looked up as ``np.exp`` at call time, as
rfkit's numpy reference and :func:`rfkit.base.numerics.logsumexp` do). Exponentials evaluated elsewhere (compiled
Numba kernels, ``np.logaddexp``, a name bound by ``from numpy import exp``) are not seen, so the count is a lower bound
on the exponentials of code that uses those; other threads' ``np.exp`` calls during the call are counted with it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

__all__ = ["exp_evaluations"]

_LOCK = threading.Lock()


def exp_evaluations(fn: Callable[[], object]) -> int:
    """Values computed by ``numpy.exp`` while ``fn()`` runs (the sum of its results' sizes).

    Examples
    --------
    >>> import numpy as np
    >>> exp_evaluations(lambda: np.exp(np.zeros((3, 4))))
    12
    """
    real = np.exp
    count = 0

    def counting_exp(*args, **kwargs):
        nonlocal count
        out = real(*args, **kwargs)
        count += int(np.size(out))
        return out

    with _LOCK:
        np.exp = counting_exp
        try:
            fn()
        finally:
            np.exp = real
    return count
