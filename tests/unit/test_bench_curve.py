"""The bench's curve of issue 46: the third size is a real architecture of at least 6 GB, the curve's
rows come from the starts' own figures, and a quick run keeps what it did not measure, named."""
from __future__ import annotations

import math

from bench import big_model, curve
from bench.run import carry


def test_the_large_model_is_at_least_6_gb_of_a_llama_3_2_3b_shape():
    name, config, shards = big_model.SIZES["large"]
    size = sum(math.prod(s) for _, s in big_model.tensors(config)) * 2
    assert size >= 6e9 and shards == 7 and name == "llama-3.2b-random"
    assert (config["hidden_size"], config["intermediate_size"], config["num_key_value_heads"]) == (3072, 8192, 8)
    assert config["num_attention_heads"] * config["head_dim"] == config["hidden_size"]
    assert big_model.SIZES["big"][1] is big_model.CONFIG          # the 3.4 GB model is unchanged


def _size(first_token: float, cold: float, warm: float, fraction: float | None, gb: float) -> dict:
    def s(v: float) -> dict:
        return {"median": v, "spread": 0.05}
    m = {"weights_bytes": int(gb * 1e9), "detail": {"phases": {"local": {"first_token": s(first_token), "load": s(5.0)}}},
         "cold": {"first_token_ratio_vs_local": s(cold), "load_ratio_vs_local": s(cold)},
         "warm": {"first_token_ratio_vs_local": s(warm), "load_ratio_vs_local": s(warm)}}
    if fraction is not None:
        m["cold"]["warmed_fraction_at_load_begin"] = s(fraction)
    return m


def test_curve_rows_are_per_size_smallest_first_from_the_starts_figures():
    start = {"default_path": "mount", "large": _size(70.0, 1.3, 1.2, 0.8, 6.34),
             "smollm2": _size(43.0, 1.01, 0.98, 1.0, 0.27), "curve": []}
    rows = curve.rows(start)
    assert [r["size"] for r in rows] == ["smollm2", "large"]
    assert rows[1]["weights_gb"] == 6.34 and rows[1]["local_first_token_s"] == 70.0
    assert rows[1]["cold.first_token_ratio_vs_local"] == 1.3 and rows[1]["warm.load_ratio_vs_local"] == 1.2
    assert rows[1]["cold.warmed_fraction_at_load_begin"] == 0.8


def test_the_curve_is_drawn_as_a_png(tmp_path):
    rows = curve.rows({"a": _size(43.0, 1.01, 0.98, 1.0, 0.27), "b": _size(50.0, 1.1, 1.05, 1.0, 3.36)})
    out = curve.plot(rows, tmp_path / "c.png", "test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_a_quick_run_carries_the_parts_it_did_not_measure_with_the_commit_that_did():
    previous = ({"commit": "abc1234", "started": "2026-12-04T04:28:00", "mode": "quick",
                                    "upload": {"ratio_vs_rclone": {"median": 1.4}}, "start": {"old": 1},
                                    "hosts": {"one_s": 50}, "carried": {"hosts": {"commit": "0ld0000"}},
                                    "run_seconds": 1265, "empty": {}})
    results = {"commit": "def5678", "mode": "quick", "start": {"new": 1}, "upload": {}}
    carry(results, previous)
    assert results["start"] == {"new": 1} and "run_seconds" not in results and "empty" not in results
    assert results["upload"] == {"ratio_vs_rclone": {"median": 1.4}}
    assert results["carried"] == {"upload": {"commit": "abc1234", "started": "2026-12-04T04:28:00"},
                                  "hosts": {"commit": "0ld0000"}}


def test_a_partial_previous_run_is_not_carried():
    results: dict = {"start": {}}
    carry(results, {"commit": "abc", "partial": True, "upload": {"x": 1}})
    assert results == {"start": {}}
