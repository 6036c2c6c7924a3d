"""The bench's sampling (bench/stats.py): rounds interleave the contenders in a rotated order, a
figure is the median with min, max and spread, a ratio pairs the samples of one round, and a
spread above 20% is flagged."""
from __future__ import annotations

from bench import stats


def test_rounds_rotate_the_contenders_and_run_the_hook_before_each_sample():
    calls = []
    values = iter(range(1, 100))

    def contender(name):
        def run():
            calls.append(name)
            return float(next(values))
        return run

    got = stats.interleaved({n: contender(n) for n in "abc"}, n=5, before=lambda: calls.append("drop"))
    order = [c for c in calls if c != "drop"]
    assert order == list("abc" "bca" "cab" "abc" "bca")
    assert calls.count("drop") == 15 and calls[0] == "drop"
    assert all(len(s.values) == 5 for s in got.values())


def test_median_spread_and_the_noisy_flag():
    steady = stats.Samples([10.0, 10.5, 9.8, 10.2, 10.1]).summary()
    assert steady["median"] == 10.1 and steady["min"] == 9.8 and steady["max"] == 10.5 and not steady["noisy"]
    noisy = stats.Samples([10.0, 14.0, 9.0, 10.0, 10.0]).summary()
    assert noisy["spread"] == 0.5 and noisy["noisy"]


def test_a_ratio_pairs_the_samples_of_each_round():
    baseline = stats.Samples([2.0, 4.0, 2.0, 4.0, 2.0])      # the machine slowed down in rounds 2 and 4
    ours = stats.Samples([1.0, 2.0, 1.0, 2.0, 1.0])          # ... for both
    r = stats.ratio(baseline, ours).summary()
    assert r["median"] == 2.0 and r["spread"] == 0.0 and not r["noisy"]
