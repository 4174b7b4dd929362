"""Progress of a long run: a tqdm bar on a terminal, timestamped lines elsewhere (logs, CI, ``nohup``).

A run that is not attached to a terminal used to print nothing until it ended; :func:`progress` gives it a
line at the start, one every ``interval`` seconds (default 30, ``RFKIT_PROGRESS_INTERVAL`` overrides it) and
one at the end::

    validate (quick): 1,204/5,031 cells (24%), 1m32s elapsed, ~4m51s left at the rate so far [lara.eq8.mis_unbiased]

Both kinds share tqdm's small interface (``update``, ``total``, ``set_description``, ``set_postfix_str``,
``close``), so the engine drives either the same way.
"""
from __future__ import annotations

import os
import sys
import time
from typing import TextIO

__all__ = ["progress", "LineProgress"]


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class LineProgress:
    """tqdm's interface as plain lines on ``file``: at the start, at most every ``interval`` seconds, at the end."""

    def __init__(self, total: int, desc: str, *, unit: str = "cell", file: TextIO | None = None,
                 interval: float | None = None):
        if interval is None:
            interval = float(os.environ.get("RFKIT_PROGRESS_INTERVAL", "30"))
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval}")
        self.total, self.desc, self.unit, self.interval = int(total), desc, unit, interval
        self.file = file if file is not None else sys.stderr
        self.n, self.postfix = 0, ""
        self._start = self._last = time.monotonic()
        self._emit(final=False)

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self._emit(final=False)

    def set_description(self, desc: str) -> None:
        self.desc = desc

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:  # noqa: ARG002 (tqdm's signature)
        self.postfix = text

    def close(self) -> None:
        self._emit(final=True)

    def line(self, *, final: bool) -> str:
        elapsed = time.monotonic() - self._start
        share = self.n / self.total if self.total else 1.0
        text = f"{self.desc}: {self.n:,}/{self.total:,} {self.unit}s ({100 * share:.0f}%), {_clock(elapsed)} elapsed"
        if final:
            text += ", done"
        elif 0 < self.n < self.total:
            text += f", ~{_clock(elapsed * (self.total - self.n) / self.n)} left at the rate so far"
        return text + (f" [{self.postfix}]" if self.postfix and not final else "")

    def _emit(self, *, final: bool) -> None:
        print(self.line(final=final), file=self.file, flush=True)


def progress(total: int, desc: str, *, show: bool | None = None, unit: str = "cell"):
    """A progress display for ``total`` steps, or ``None`` when ``show`` is False.

    ``show=None`` or ``True``: a tqdm bar when stderr is a terminal (and not under ``CI``), else a
    :class:`LineProgress` on stderr.
    """
    if show is False:
        return None
    if sys.stderr.isatty() and not os.environ.get("CI"):
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, unit=unit)
    return LineProgress(total, desc, unit=unit)
