"""``performer.*`` claims (Choromanski et al., "Rethinking Attention with Performers", ICLR 2021).

Register: ``../shared/claims/performer.md``; seed text ``003_4855bc6ab225d7a6.txt``. Topic modules:

* :mod:`.attention` — FAVOR+ attention, Algorithm 1, prefix sums, generalized attention, costs;
* :mod:`.moments` — unbiasedness and MSE of the softmax estimators (Sec 2.3, Lemmas 1-2, derived moments);
* :mod:`.regimes` — where they break down: Lemma 2's SM -> 0 limits, hyperbolic vs positive, Fig 2;
* :mod:`.orf` — orthogonal features: Theorem 2, ORF unbiasedness and MSE closed forms, B.2 blocks;
* :mod:`.outputs` — the attention matrix and normalised output (Abstract, Sec 5, delta method, Fig 4);
* :mod:`.common` — the grids, pairs and exact expectations these four share;
* :mod:`.smreg` — the regularized softmax kernel: Theorem 1, Lemma 3, the F.3 proof chain, SMREG MSEs;
* :mod:`.beautiful` — Remark 1, Eqs 38-43, 54-74, Lemmas 4-6, Theorems 3, 5, 6, derived MGF and
  projection-law predictions;
* :mod:`.convergence` — uniform convergence and the number of features (Theorems 4 and 7, m = Θ(d log d),
  variance against m) and the model-level reproductions (Fig 3, App E).
"""
