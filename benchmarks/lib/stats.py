"""The statistics every suite reports with: ONE percentile definition (nearest rank), the
median, and the median of per-round values with their range, ``median [min–max]``.

Reading them: each round gives a p50 (and a p99) per contender; a suite reports the median
of those over rounds with the range of the rounds, and ratios are formed within a round
against a baseline of the same run, never across runs."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any


def pct(values: Iterable[float], q: float) -> float:
    """Nearest-rank percentile, ``q`` in 0..100 (p99 of 300 samples is the 3rd slowest)."""
    s = sorted(values)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k]


def med(values: Iterable[float]) -> float:
    """The median (NaN of nothing)."""
    v = list(values)
    return statistics.median(v) if v else float("nan")


def med_range(values: Iterable[float]) -> dict[str, float]:
    """``{"p50": median, "min": ..., "max": ...}`` of per-round values."""
    v = list(values)
    return {"p50": statistics.median(v), "min": min(v), "max": max(v)}


def spread(values: Iterable[float], digits: int | Callable[[float], str] = 3) -> str:
    """``median [min–max]`` of per-round values (NaNs dropped; one value alone; "—" of none).
    ``digits`` is a number of decimals or a formatter."""
    v = [x for x in values if x == x]
    fmt: Callable[[float], str] = digits if callable(digits) else (lambda x, d=digits: f"{x:.{d}f}")
    if not v:
        return "—"
    if len(v) == 1:
        return fmt(v[0])
    return f"{fmt(statistics.median(v))} [{fmt(min(v))}–{fmt(max(v))}]"


def ms(ns: float) -> str:
    """Nanoseconds as milliseconds, 3 decimals."""
    return f"{ns / 1e6:.3f}"


def ratio_spread(num: Sequence[float], den: Sequence[float], digits: int = 2) -> str:
    """``median [min–max]`` of the per-round ratios ``num[i] / den[i]`` (pairs of one round)."""
    return spread([a / b for a, b in zip(num, den, strict=True) if b], digits)


def time_calls(fn: Callable[[], Any], count: int) -> list[int]:
    """Nanoseconds of each of ``count`` calls of ``fn``."""
    out = []
    clock = time.perf_counter_ns
    for _ in range(count):
        t0 = clock()
        fn()
        out.append(clock() - t0)
    return out
