"""``lara.*`` claims (Zheng, Wang, Kong, "Linear Complexity Randomized Self-attention Mechanism", ICML 2022).

Register: ``../shared/claims/lara.md``; seed text ``000_d62fa2cae7f5a446.txt``. Topic modules:

* :mod:`.identities` — the identities of RFA, RA and the weights (Eqs 2-4, 9; Prop 3.1; Lemma A.1; G.2, G.3.2);
* :mod:`.forms` — LARA's forms and special cases (App D, Eqs 10, 28, 35, §4.3, Corollary C.1), Algorithms 1-3 and
  the register's identity-type derived predictions;
* :mod:`.statistical` — expectations and moments of RFA, RA and IS (Eq 1, §2.3, §3.1-3.2, Prop 3.2, Eq 30);
* :mod:`.variance` — variance, consistency and optimality (RA's MSE and biased RA, MIS, Eqs 8-10, 20, 36, App C);
* :mod:`.performance` — complexity claims, Table 6 and Figure 1 (via :mod:`rfkit.validation.reproductions.lara`);
* :mod:`.inputs` — the register's input generators (G-gauss, G-norm, G-peaked, G-smooth, G-degenerate).
"""
