"""One sentence from a verdict's reason: the report site, the README's verdict table, ``report.md`` and ``rfkit
cite`` all shorten reasons with :func:`reason_summary` (the full reason stays in ``verdicts.json`` and on the claim's
page)."""

from __future__ import annotations

import re

__all__ = ["SUMMARY_CHARS", "reason_summary"]

#: Longest one-sentence summary of a reason (:func:`reason_summary`); the full reason stays on the claim page's
#: details block and in ``verdicts.json``.
SUMMARY_CHARS = 320
#: Longest clause quoted for the deciding reading's worst case, and for each other reading.
_WORST_CHARS, _CLAUSE_CHARS = 200, 60
#: A reading reported beside the verdict (:func:`rfkit.validation.engine.decide` writes these sentences).
_BESIDE = re.compile(r"\b(Holds|Fails|Undecided|Not run at this tier) under the reading (\S+) \(")
_VIOLATION = re.compile(r"^violation (\S+) ")


def _cut(text: str, limit: int) -> str:
    """``text`` cut at a word to at most ``limit`` characters, "…" marking the cut."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[:limit - 1].rsplit(" ", 1)[0].rstrip(" ,;:(") + "…"


def _per_reading(main: str, readings: list[str]) -> list[tuple[str | None, str]]:
    """Split the deciding part of a reason into ``(reading, reason)`` clauses: the engine joins several deciding
    readings as ``"name: reason; name: reason"``; one reading's reason has no name."""
    names = sorted((r for r in readings if r), key=len, reverse=True)
    if len(readings) < 2 or not names:
        return [(None, main)]
    pattern = re.compile(r"(?:^|; )(" + "|".join(re.escape(n) for n in names) + r"): ")
    starts = list(pattern.finditer(main))
    if not starts or starts[0].start() != 0:
        return [(None, main)]
    ends = [m.start() for m in starts[1:]] + [len(main)]
    return [(m.group(1), main[m.end():end]) for m, end in zip(starts, ends, strict=True)]


def _group(clauses: dict[str, list[str]]) -> list[str]:
    """``{clause: [reading, ...]}`` as text, the largest group first; more than three names become a count."""
    out = []
    for clause, names in sorted(clauses.items(), key=lambda kv: -len(kv[1])):
        who = ", ".join(names) if len(names) <= 3 else f"{len(names)} readings"
        out.append(f"{who}: {clause}")
    return out


def reason_summary(reason: str, readings: list[str] | tuple[str, ...] = (), limit: int = SUMMARY_CHARS) -> str:
    """One sentence of at most ``limit`` characters from a verdict's reason (as
    :func:`rfkit.validation.engine.decide` writes it).

    The sentence is the deciding readings' worst case (the largest ``violation``; else the first reading's
    reason), up to its first "; " clause and cut at a word, then one short clause per other deciding reading
    (its reason up to " at ", e.g. ``violation 1 (tolerance 0.1)``), readings with identical clauses grouped,
    then the readings reported beside the verdict grouped by outcome (``beside the verdict, fails: E/t, R/s``).
    Groups that do not fit are counted (``+N more readings``). ``readings`` are the claim's variant names
    (``claim.variants``), which split a multi-reading reason. The full reason is not changed.
    """
    if not isinstance(reason, str):
        raise TypeError(f"reason must be a str, got {type(reason).__name__}")
    if limit < 80:
        raise ValueError(f"limit must be >= 80 characters, got {limit}")
    reason = " ".join(reason.split())
    if not reason:
        return ""
    beside_hits = list(_BESIDE.finditer(reason))
    main = reason[:beside_hits[0].start()] if beside_hits else reason
    main = main.strip().rstrip(".").strip()
    clauses = _per_reading(main, list(readings)) if main else []

    def effect(text: str) -> float:
        m = _VIOLATION.match(text)
        try:
            return float(m.group(1)) if m else float("-inf")
        except ValueError:
            return float("-inf")

    parts: list[str] = []
    if clauses:
        worst = max(range(len(clauses)), key=lambda i: (effect(clauses[i][1]), -i))
        name, text = clauses[worst]
        head = text.split("; ", 1)[0].strip()
        parts.append(_cut((f"{name}: " if name else "") + head, _WORST_CHARS))
        others: dict[str, list[str]] = {}
        for i, (name, text) in enumerate(clauses):
            if i != worst:
                short = _cut(text.split("; ", 1)[0].split(" at ", 1)[0], _CLAUSE_CHARS)
                others.setdefault(short, []).append(name or "?")
        parts += _group(others)
    beside: dict[str, list[str]] = {}
    for m in beside_hits:
        beside.setdefault(m.group(1).lower(), []).append(m.group(2))
    parts += [f"beside the verdict, {verb}: {', '.join(names)}" for verb, names in beside.items()]
    sentence, left = parts[0] if parts else "", 0
    for k, part in enumerate(parts[1:], start=1):
        if len(sentence) + len(part) + 2 + 24 > limit:  # room for the "; +N more readings" tail
            left = len(parts) - k
            break
        sentence += "; " + part
    if left:
        sentence += f"; +{left} more group(s)"
    return _cut(sentence, limit - 1).rstrip(".") + "."
