"""``eva.*`` claims (Zheng et al., "Efficient Attention via Control Variates", ICLR 2023).

Register: ``../shared/claims/eva.md``; seed text ``002_b2e9d84e2f6b65de.txt``. Topic modules:

* :mod:`.identities` — the identities of RFA as SNIS, per-token control variates, EVA (Eqs 4, 6, 7, 11-16, 27,
  App B, C, D, G) and the deterministic derived predictions;
* :mod:`.control_variates` — the statistical claims of control variates (§2-3, App B, Lemma 3, Prop 1-2,
  App G.2) and the Monte Carlo derived predictions;
* :mod:`.practical` — practical EVA's statistical claims (partitioning reduces the error, the gap to RFA), the
  complexity statements and the efficiency reproductions (Figures 1-2, Tables 1-4, 6, 7);
* :mod:`.inputs` — the register's input generators (the standard sweep) and proposal means.
"""
