"""rfkit.gpu — the Torch execution backend (CUDA when present, CPU otherwise).

Torch is imported only when the backend is used; rfkit works without it.
"""
