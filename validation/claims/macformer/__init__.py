r"""Macformer claims (``004_803b6fd9a1d4a879.txt``, register ``../shared/claims/macformer.md``).

Topic modules: :mod:`.kernels` (Table 1 coefficients), :mod:`.ppsbn` (Algorithm 1, Theorem 3, post-SBN),
:mod:`.attention` (Definition 2, the RMFA display, Theorems 1-2), :mod:`.features` (Definition 3),
:mod:`.complexity` (Figure 2, Table 2 memory), :mod:`.figures` (Figure 4), :mod:`.derived` (the register's
derived predictions); shared helpers in :mod:`.common` and input generators in :mod:`.inputs`. The registry
collects the claims the topic modules define. Estimators come from :mod:`rfkit.estimators.rmf`,
:mod:`rfkit.estimators.ppsbn` and :mod:`rfkit.estimators.maclaurin_kernels`, predictions from
:mod:`rfkit.theory.maclaurin` and :mod:`rfkit.theory.cost`; the Figure 4 quantities come from
:mod:`rfkit.validation.reproductions.macformer`.

Conventions of the checks
-------------------------
* Readings of the register (norm ball, batch-norm statistics, power sign, RMF law/weight, coefficient source,
  mask fill...) are variants; each gets its own verdict. Variant names join the reading values with ``|``.
* Where an undefined value (nan, a printed formula with no value at ``N``) is itself the failure, the violation
  is *capped*: a relative error counts at most 1 (completely wrong), and a non-finite value counts as 1
  (:func:`.common._capped`), so the engine sees a decisive finite effect instead of an undecidable nan.
* Monte Carlo cells are sized from exact moments (:func:`rfkit.validation.stats.required_replicates`), capped
  per tier; a cell whose need exceeds the cap reports the shortfall as an underpowered cell.
* Trend claims ("falls", "grows") put the prediction at ``±tolerance`` with the matching one-sided alternative: a
  cell is refuted only when the trend is significantly in the wrong direction, and supported only when it is
  significantly in the claimed direction.
"""
