r"""Macformer claims (register ``../shared/claims/macformer.md``); shared helpers in :mod:`.common`.

Conventions of the checks
-------------------------
* Readings of the register are variants, each with its own verdict; variant names join the reading values with ``|``.
* Where an undefined value (nan, a printed formula with no value at ``N``) is itself the failure, the violation is
  *capped* (:func:`.common._capped`): a relative error counts at most 1 and a non-finite value counts as 1, so the
  engine sees a decisive finite effect instead of an undecidable nan.
* Monte Carlo cells are sized from exact moments (:func:`rfkit.validation.stats.required_replicates`), capped per
  tier; a cell whose need exceeds the cap reports the shortfall as an underpowered cell.
* Trend claims ("falls", "grows") put the prediction at ``±tolerance`` with the matching one-sided alternative: a
  cell is refuted only when the trend is significantly in the wrong direction, supported only when it is
  significantly in the claimed direction.
"""
