"""``lara.*`` claims (Zheng, Wang, Kong, "Linear Complexity Randomized Self-attention Mechanism", ICML 2022).

Register: ``../shared/claims/lara.md``; seed text ``000_d62fa2cae7f5a446.txt``. Topic modules:

* :mod:`.identities` — the identities of RFA, RA and LARA (Eqs 2-4, 9, 10, 28, 35; Prop 3.1; Lemma A.1;
  Corollary C.1; App D; Algorithms 1-3; §4.3's special cases) and the register's identity-type derived
  predictions;
* :mod:`.statistical` — expectations, moments, rates, optimality and inequalities of RFA, RA, MIS and LARA
  (and the register's statistical derived predictions);
* :mod:`.performance` — complexity claims, Table 6 and Figure 1 (via :mod:`rfkit.validation.reproductions.lara`);
* :mod:`.inputs` — the register's input generators (G-gauss, G-norm, G-peaked, G-smooth, G-degenerate).
"""
