"""performer.* claims: see the package docstring for this module's topic."""

CLAIMS: list = []
