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
