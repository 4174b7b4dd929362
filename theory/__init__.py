"""rfkit.theory — closed-form predictions: exact moments, bounds, coefficients and cost models.

Modules:

* :mod:`~rfkit.theory.cost` — exact matrix-product (GEMM) shape lists and flop counts of the reference
  estimators, byte counts of stored states, prefix-scan work and depth, projection storage and apply cost:
  the single source of truth for the benchmark's roofline and the complexity claims;
* :mod:`~rfkit.theory.generalized` — kernels of generalized attention (ReLU arc-cosine, angular) and exact
  quadrature for ``K_f`` and its variance;
* :mod:`~rfkit.theory.softmax` — exact moments of the softmax-kernel random-feature estimators;
* :mod:`~rfkit.theory.rounding` — rounding-error bounds (Higham's γ_n) and FAVOR+'s float32 forward-error bound;
* :mod:`~rfkit.theory.rff` — random Fourier features of the Gaussian kernel: moments of the random-phase
  (``RBFSampler``) and paired cos/sin maps;
* :mod:`~rfkit.theory.importance` — importance-sampling moments for Gaussian targets and proposals;
* :mod:`~rfkit.theory.smreg` — the regularized softmax kernel SMREG: ₀F₁/Bessel closed form, Eq 21/29/30
  series, Theorem 1's proof chain, iid/orthogonal MSEs and joint moments;
* :mod:`~rfkit.theory.sphere` — moments and angles of a uniform unit vector (Lemma 3, Eqs 24-27);
* :mod:`~rfkit.theory.beautiful` — beautiful functions (Performer F.4): moments, τ/L/Δ̂, F and MSE series
  (Eqs 61-74), the ORF projection law, MGFs, tail bounds of Lemma 4 and Theorems 3, 5;
* :mod:`~rfkit.theory.eva` — EVA: Gaussian product, control-variate moments, weighted MSE J, subset masses,
  asymptotics, practical EVA's GEMM list;
* :mod:`~rfkit.theory.lara` — RA/LARA: mixture moments, IS-weight second moments, kernel relative variance, the
  delta-method SNIS bias/variance, MIS variance, App D optimal weights, RA/LARA GEMM lists;
* :mod:`~rfkit.theory.maclaurin` — Macformer: exact Maclaurin coefficients (sympy, Cauchy route), RMF moments,
  κ(s), Rademacher moments, the RMFA delta method;
* :mod:`~rfkit.theory.convergence` — Theorems 4/7: l, h*, δ, σ, m_pred, the Matérn kernel, the (E)/(R)
  readings of the ∞-norm.
"""
