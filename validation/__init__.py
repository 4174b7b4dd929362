"""rfkit.validation — claims, Monte Carlo checks, verdicts, results, reports and the ``rfkit`` CLI."""
