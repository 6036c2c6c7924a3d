"""The bench's own pieces for the read paths: the big model's shape and files, and how vLLM's load
time is read from its log."""
from __future__ import annotations

import json
import math
import struct

import pytest

from bench import big_model
from bench.weights import load_seconds


def test_the_big_model_is_at_least_3_gb_of_llama_weights():
    shapes = big_model.tensors()
    size = sum(math.prod(s) for _, s in shapes) * 2
    assert size >= 3e9
    names = {n for n, _ in shapes}
    assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names   # tied, as configured
    assert big_model.CONFIG["tie_word_embeddings"] and big_model.CONFIG["vocab_size"] == 49152
    assert len(names) == 2 + 9 * big_model.CONFIG["num_hidden_layers"]


def test_a_shard_is_valid_safetensors_with_finite_small_bf16_values(tmp_path):
    part = [("model.layers.0.input_layernorm.weight", (8,)), ("model.layers.0.mlp.up_proj.weight", (16, 8))]
    path = tmp_path / "s.safetensors"
    big_model.write_shard(path, part)
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    assert n % 8 == 0 and len(data) == (8 + 16 * 8) * 2
    norm = header["model.layers.0.input_layernorm.weight"]
    assert norm["dtype"] == "BF16" and norm["shape"] == [8] and norm["data_offsets"] == [0, 16]
    assert data[:16] == b"\x80\x3f" * 8                                   # 1.0
    up = header["model.layers.0.mlp.up_proj.weight"]["data_offsets"]
    for i in range(up[0], up[1], 2):
        bits = struct.unpack("<H", data[i:i + 2])[0]
        exponent = (bits >> 7) & 0xFF
        assert 116 <= exponent <= 121, hex(bits)                          # 2^-11 .. 2^-6: finite, small


LOG = """(Worker pid=39) INFO 1796138908.939 Starting to load model /models/m...
(Worker pid=39) Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00,  2.48it/s]
(Worker pid=39) INFO 1796138909.533 Loading weights took 0.41 seconds
(EngineCore pid=26) INFO 1796138909.754 Reducing Torch threads from 2 to 1 for serving.
(EngineCore pid=26) INFO 1796138909.757 Using LBHNC KV cache layout.
"""


def test_the_load_is_read_from_vllms_timestamps():
    assert load_seconds(LOG) == pytest.approx(0.815)
    with pytest.raises(RuntimeError):
        load_seconds(LOG.split("\n", 1)[1])        # no start line


def test_a_start_is_timed_in_phases_from_the_containers_start():
    from bench.weights import phases

    t0 = 1796138900.0
    got = phases(LOG, t0, ready_at=t0 + 20.5, first_token_at=t0 + 22.25)
    assert got == {"load_begins": 8.94, "weights_loaded": 9.75, "ready": 20.5, "first_token": 22.25}
    with pytest.raises(RuntimeError):
        phases("no vLLM lines at all", t0, t0, t0)


def test_start_ratios_are_per_round_and_the_copy_counts_in_bucket_to_first_token():
    from bench import start
    from bench.stats import Samples
    from bench.weights import Start

    p = start.Paths.__new__(start.Paths)
    p.starts, p.copy_s = {}, {}
    for i in range(3):
        p._keep("local", Start(20, 2.0, 2.0, "x", {"load_begins": 10, "weights_loaded": 12, "ready": 20,
                                                  "first_token": 20.0 + i}))
        p._keep("copy:cold", Start(20, 2.2, 2.2, "x", {"load_begins": 10, "weights_loaded": 12.2, "ready": 20.2,
                                                      "first_token": 22.0 + i}), copy_s=4.0)
    got = start.summary(p, {"local": Samples([20.0, 21.0, 22.0])})
    r = got["ratios"]["copy:cold"]
    assert r["load_ratio_vs_local"]["median"] == pytest.approx(1.1)
    assert r["first_token_ratio_vs_local"]["median"] == pytest.approx(23 / 21, rel=1e-3)   # median of 22/20, 23/21, 24/22
    assert r["bucket_to_first_token_ratio_vs_local"]["median"] == pytest.approx(27 / 21, rel=1e-3)
    assert got["phases"]["copy:cold"]["copy"]["median"] == 4.0
    assert got["phases"]["copy:cold"]["bucket_to_first_token"]["median"] == 27.0


def test_init_engine_seconds_are_read_from_vllms_line():
    import re

    from bench.weights import INIT_ENGINE

    line = "(EngineCore pid=25) INFO 1796513131.341 init engine (profile, create kv cache, warmup model) took 3.66 s"
    assert float(re.search(INIT_ENGINE, line).group(1)) == 3.66
    assert re.search(INIT_ENGINE, "init engine took 3 s") is None


def test_a_model_without_its_tokenizer_source_is_refused_before_any_shard(tmp_path):
    """The synthetic models take SmolLM2's tokenizer; built before it is there, they were written without
    one and vLLM exited at start. Now refused in one line naming what is missing and what to run."""
    with pytest.raises(SystemExit, match="lacks tokenizer.json, tokenizer_config.json; run scripts/build-smollm2-model"):
        big_model.build(tmp_path / "out", tmp_path / "no-smollm2")
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.tmp").exists()
