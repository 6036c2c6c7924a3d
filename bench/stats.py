"""Samples that can steer: every figure is the median of several samples taken A/B interleaved
(each round runs every contender once, in a rotated order), with min, max and spread kept; a
ratio is the median of the per-round ratios, and one whose samples spread more than SPREAD_FLAG
is flagged. The machine's load average is recorded around every sample (machines here are shared)."""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

SAMPLES = 5            # at least five samples per figure
SPREAD_FLAG = 0.20     # (max - min) / median above this: the figure is flagged as noisy


@dataclass
class Samples:
    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def spread(self) -> float:
        m = self.median
        return (max(self.values) - min(self.values)) / m if m else 0.0

    def summary(self, digits: int = 3) -> dict:
        return {"median": round(self.median, digits), "min": round(min(self.values), digits),
                "max": round(max(self.values), digits), "n": len(self.values),
                "spread": round(self.spread, 3), "noisy": self.spread > SPREAD_FLAG,
                "samples": [round(v, digits) for v in self.values]}


class Load:
    """The machine's 1-minute load average, read before and after each sample."""

    def __init__(self) -> None:
        self.readings: list[float] = []

    def read(self) -> None:
        self.readings.append(os.getloadavg()[0])

    def summary(self) -> dict:
        if not self.readings:
            return {}
        return {"cpus": os.cpu_count(), "load1_median": round(statistics.median(self.readings), 2),
                "load1_max": round(max(self.readings), 2), "readings": len(self.readings)}


LOAD = Load()


def interleaved(contenders: Mapping[str, Callable[[], float]], n: int = SAMPLES,
                before: Optional[Callable[[], None]] = None) -> dict[str, Samples]:
    """Each contender returns one sample (seconds); round i runs them all, starting at the i-th
    (A B C, B C A, C A B, ...), each after ``before`` (e.g. dropping the page cache)."""
    names = list(contenders)
    out = {name: Samples() for name in names}
    for i in range(n):
        for name in names[i % len(names):] + names[:i % len(names)]:
            if before is not None:
                before()
            LOAD.read()
            out[name].values.append(contenders[name]())
            LOAD.read()
    return out


def timed(fn: Callable[[], object]) -> Callable[[], float]:
    def run() -> float:
        start = time.monotonic()
        fn()
        return time.monotonic() - start
    return run


def ratio(numerator: Samples, denominator: Samples) -> Samples:
    """Per-round ratios numerator_i / denominator_i (the rounds are paired: taken back to back)."""
    return Samples([a / b for a, b in zip(numerator.values, denominator.values) if b])


def flagged(figures: Mapping[str, dict]) -> list[str]:
    return [k for k, v in figures.items() if isinstance(v, dict) and v.get("noisy")]
