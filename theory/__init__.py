"""rfkit.theory — closed-form predictions: exact moments, bounds, coefficients and cost models.

Modules:

* :mod:`~rfkit.theory.cost` — exact matrix-product (GEMM) shape lists and flop counts of the reference
  estimators, the single source of truth for the benchmark's roofline and the complexity claims.
"""
