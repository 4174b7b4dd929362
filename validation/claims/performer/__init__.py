"""``performer.*`` claims (Choromanski et al., "Rethinking Attention with Performers", ICLR 2021).

Register: ``../shared/claims/performer.md``; seed text ``003_4855bc6ab225d7a6.txt``. Topic modules:

* :mod:`.attention` — FAVOR+ attention, Algorithm 1, prefix sums, generalized attention, costs;
* :mod:`.moments` — unbiasedness and MSE of the softmax estimators (Lemmas 1-2, Theorem 2, ORF
  closed forms, output delta method, Figs 2 and 4);
* :mod:`.smreg` — the regularized softmax kernel: Theorem 1, Lemma 3, the F.3 proof chain, SMREG MSEs;
* :mod:`.beautiful` — Remark 1, Eqs 38-43, 54-74, Lemmas 4-6, Theorems 3, 5, 6, derived MGF and
  projection-law predictions;
* :mod:`.convergence` — uniform convergence and the number of features (Theorems 4 and 7, m = Θ(d log d),
  variance against m) and the model-level reproductions (Fig 3, App E).
"""
