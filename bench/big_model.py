"""Big loadable models for the bench: the Llama architecture with random bfloat16 weights, written by
us, with SmolLM2's tokenizer and chat template (its vocabulary, 49152, is the model's). vLLM loads them
and answers; the answers are noise, which is all a bench of the read path needs. Two sizes (SIZES):

- ``big``: llama-1.7b-random, about 1.7B parameters, 3.4 GB of safetensors in 4 shards and an index;
- ``large``: llama-3.2b-random, about 3.2B parameters (a Llama 3.2 3B's widths: hidden 3072, MLP 8192,
  24 heads, 8 KV heads of 128; 30 layers), 6.3 GB in 7 shards: the largest this machine's 24 GiB
  load beside the page cache that holds it twice through the mount.

    python -m bench.big_model [--size big|large] [--out DIR]    (default: $CACHE/models/<name>)

Weights are drawn as bfloat16 bit patterns directly (random sign, exponents 2^-11..2^-6, random
mantissa, from os.urandom): every value is finite and small, and no float math (nor numpy) is
needed to write 3.4 GB. Norm
weights are 1.0. The folder is written once; a finished one is left as it is (``.complete``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import struct
from pathlib import Path


SMOLLM2 = "SmolLM2-135M-Instruct"
NAME = "llama-1.7b-random"
CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False, "mlp_bias": False,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 26,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-05, "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
    "tie_word_embeddings": True, "vocab_size": 49152, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2,
    "dtype": "bfloat16", "torch_dtype": "bfloat16", "use_cache": True, "initializer_range": 0.02,
}
SHARDS = 4
LARGE_NAME = "llama-3.2b-random"
LARGE_CONFIG = {**CONFIG, "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 30,
                "num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 128}
# size -> (folder name, config, shards): each shard about 0.9 GB, as Hugging Face shards a checkpoint
SIZES = {"big": (NAME, CONFIG, SHARDS), "large": (LARGE_NAME, LARGE_CONFIG, 7)}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")


def cache_dir() -> Path:
    base = os.environ.get("RUSTFS_VLLM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "rustfs-vllm")
    return Path(base) / "models"


def tensors(c: dict = CONFIG) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every weight, in vLLM's Llama naming (lm_head tied to the embedding)."""
    h, i, kv = c["hidden_size"], c["intermediate_size"], c["num_key_value_heads"] * c["head_dim"]
    out: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (c["vocab_size"], h))]
    for n in range(c["num_hidden_layers"]):
        p = f"model.layers.{n}"
        out += [(f"{p}.input_layernorm.weight", (h,)), (f"{p}.post_attention_layernorm.weight", (h,)),
                (f"{p}.self_attn.q_proj.weight", (h, h)), (f"{p}.self_attn.k_proj.weight", (kv, h)),
                (f"{p}.self_attn.v_proj.weight", (kv, h)), (f"{p}.self_attn.o_proj.weight", (h, h)),
                (f"{p}.mlp.gate_proj.weight", (i, h)), (f"{p}.mlp.up_proj.weight", (i, h)),
                (f"{p}.mlp.down_proj.weight", (h, i))]
    return out + [("model.norm.weight", (h,))]


# bfloat16, little-endian: byte 0 = exponent's lowest bit and the 7 mantissa bits (kept random),
# byte 1 = sign and the exponent's upper 7 bits: mapped to 58-60, so exponents 116-121 (2^-11..2^-6)
HIGH = bytes((b & 0x80) | (58 + (b & 0x7F) % 3) for b in range(256))


def bf16_bits(shape: tuple[int, ...], norm: bool) -> bytes:
    """Random small bfloat16 values as little-endian bytes (1.0 for a norm's weight)."""
    count = math.prod(shape)
    if norm:
        return b"\x80\x3f" * count
    raw = bytearray(os.urandom(2 * count))
    raw[1::2] = raw[1::2].translate(HIGH)
    return bytes(raw)


def write_shard(path: Path, names: list[tuple[str, tuple[int, ...]]]) -> None:
    """One safetensors file: an 8-byte header length, the JSON header, the tensors' bytes."""
    header, offset = {}, 0
    for name, shape in names:
        size = int(math.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        for name, shape in names:
            f.write(bf16_bits(shape, name.endswith("norm.weight")))


def built(size: str) -> Path:
    """The model of ``size`` (SIZES) in the cache folder, written first if it is not there yet."""
    name, config, shards = SIZES[size]
    return build(cache_dir() / name, cache_dir() / SMOLLM2, config, shards)


def build(out: Path, tokenizer_from: Path, config: dict = CONFIG, shards: int = SHARDS) -> Path:
    if (out / ".complete").exists():
        return out
    missing = [n for n in TOKENIZER_FILES[:2] if not (tokenizer_from / n).is_file()]
    if missing:     # vLLM cannot start a model without its tokenizer: refuse before writing GBs of shards
        raise SystemExit(f"bench: {out.name} takes its tokenizer from {tokenizer_from}, which lacks "
                         f"{', '.join(missing)}; run scripts/build-smollm2-model first")
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    all_tensors = tensors(config)
    per = -(-len(all_tensors) // shards)
    weight_map, total = {}, 0
    for k in range(shards):
        part = all_tensors[k * per:(k + 1) * per]
        shard = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        write_shard(tmp / shard, part)
        weight_map |= {name: shard for name, _ in part}
        total += sum(int(math.prod(s)) * 2 for _, s in part)
    (tmp / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    for name in TOKENIZER_FILES:
        if (tokenizer_from / name).exists():
            shutil.copyfile(tokenizer_from / name, tmp / name)
    (tmp / ".complete").write_text(f"{total}\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="big")
    ap.add_argument("--out", type=Path, help="default: $CACHE/models/<the size's name>")
    ap.add_argument("--tokenizer-from", type=Path, default=cache_dir() / SMOLLM2)
    a = ap.parse_args()
    name, config, shards = SIZES[a.size]
    path = build(a.out or cache_dir() / name, a.tokenizer_from, config, shards)
    size = sum(p.stat().st_size for p in path.glob("*.safetensors"))
    print(f"{path}: {size / 1e9:.2f} GB of safetensors")


if __name__ == "__main__":
    main()
