"""Definitions that both the estimators and the theory name, below both layers.

Nothing here estimates or predicts: input checks (:mod:`.checks`), stable log-space arithmetic
(:mod:`.numerics`), the kernel table of Macformer's Table 1 and the random Maclaurin degree law
(:mod:`.maclaurin`), and the laws and function tables the estimators are parameterised by (:mod:`.laws`).
``rfkit.estimators`` and ``rfkit.theory`` import from here, never from each other, so a prediction never
comes from the code it checks.
"""
