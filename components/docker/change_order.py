"""How a change that replaces a model's vLLM container reaches it on a Docker host (issue 58).

Each model has two places on each host: slot ``a`` (the container ``<namePrefix>-vllm-<prefix>`` on the model's
``port``, where every server starts) and slot ``b`` (``<namePrefix>-vllm2-<prefix>`` on its ``changePort``). What
replaces a container (its image, vLLM arguments, environment, weights, key, resources, stop timeout) is summed up
in a few digests, its *parts*; each `up` exports them with the slot (the secret output ``serving_slots``) and the
next one reads them back through the stack's reference to itself (components.config.previous):

- the parts are as before: the server stays where it is (nothing should replace it; should Docker replace it
  anyway, that is stop-first, since the new one needs the same name and port);
- they changed and the change goes **side by side**: the server moves to the other slot. Pulumi replaces the
  container create-first (``delete_before_replace`` off): the new one starts on the other port, its readiness
  wait passes, the endpoint's routes move to it (router-routes adds the new server, then removes the old one),
  and only then, at the end of the `up`, Pulumi deletes the old container, whose vLLM finishes what it serves
  (vllmDrainSeconds) before it exits;
- **stop-first** (``changeOrder: stopFirst``, ``auto`` when the host cannot hold both servers, and new weights of a
  mounted model, whose mount is made again in place first: Pulumi removes what depends on it before): the server
  stays in its slot and is replaced delete-first, drained the same way; meanwhile the endpoint answers the
  model's requests 503 with Retry-After.

``auto`` judges at preview whether the host holds both: on GPUs, both servers take gpuMemoryUtilization of the
same devices (vLLM's default 0.92); on CPU, the new server's memory (memoryGib, else the weights, the KV cache and
1 GiB for vLLM itself) must fit in the host's available memory (MemAvailable) with 1 GiB to spare.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from components.config.spec import ModelSpec, StackConfig
from components.mounting.copy_tool import bytes_in

OUTPUT = "serving_slots"        # {"<host>/<prefix>": {"slot": "a"|"b", "parts": {part: digest}}}, a secret output
SLOTS = ("a", "b")
RUNTIME_GIB = 1.0               # vLLM's own processes beside the weights and the KV cache (components.kube.sizing)
HEADROOM_GIB = 1.0              # what a side-by-side change leaves the host beyond the new server
GPU_DEFAULT_UTILIZATION = 0.92  # vLLM 0.30's --gpu-memory-utilization default
GPU_BOTH_AT_MOST = 0.95         # two servers' utilization of the same GPUs, at most (CUDA contexts beside them)
GIB = 2**30


@dataclass(frozen=True)
class Slot:
    letter: str
    container: str
    port: int


def slot(cfg: StackConfig, m: ModelSpec, letter: str) -> Slot:
    """Model ``m``'s place ``letter`` on a host: slot a is where every server starts (the names stacks had before)."""
    if letter == "a":
        return Slot("a", f"{cfg.name_prefix}-vllm-{m.prefix.lower()}", m.port)
    return Slot("b", f"{cfg.name_prefix}-vllm2-{m.prefix.lower()}", m.change_port)


def containers(cfg: StackConfig, m: ModelSpec) -> tuple[str, str]:
    """The two container names model ``m`` may have on a host."""
    return slot(cfg, m, "a").container, slot(cfg, m, "b").container


@dataclass(frozen=True)
class Fit:
    """Whether the host holds the new server beside the old one, and the figures that say so."""
    fits: bool
    why: str
    need: int = 0            # bytes the new server takes on the host (CPU): what a side-by-side change reserves


def fit(m: ModelSpec, gpus: str, env: Mapping[str, str], weights_bytes: int, available: Optional[int]) -> Fit:
    """auto's judgement for model ``m`` on a host (``available``: its MemAvailable in bytes, None: unknown)."""
    if gpus:
        each = m.gpu_memory_utilization or GPU_DEFAULT_UTILIZATION
        words = (f"each server takes {each:g} of GPUs {gpus} (gpuMemoryUtilization"
                 f"{'' if m.gpu_memory_utilization else ', vLLM default'}): both would take {2 * each:g}")
        return Fit(2 * each <= GPU_BOTH_AT_MOST, f"{words}, at most {GPU_BOTH_AT_MOST:g} fits")
    if m.memory_gib:
        need, how = m.memory_gib, f"its memoryGib {m.memory_gib:g} GiB"
    else:
        kv = m.kv_cache_space_gib
        if kv is None:
            try:
                kv = float(env.get("VLLM_CPU_KVCACHE_SPACE", "")) or None
            except ValueError:
                kv = None
        if kv is None:
            return Fit(False, "vLLM sizes its KV cache on CPU from the host's memory (the model has no "
                              "kvCacheSpaceGib or memoryGib), so two servers may not fit")
        need = weights_bytes / GIB + kv + RUNTIME_GIB
        how = f"about {need:.1f} GiB (weights {weights_bytes / GIB:.1f} + KV cache {kv:g} + {RUNTIME_GIB:g} for vLLM)"
    if available is None:
        return Fit(False, f"the new server needs {how} and the host's available memory is not known")
    have = available / GIB
    return Fit(need + HEADROOM_GIB <= have, f"the new server needs {how}, the host has {have:.1f} GiB available "
                                            f"({HEADROOM_GIB:g} GiB kept free)", int(need * GIB))


@dataclass(frozen=True)
class Decision:
    slot: Slot               # where its server is after this `up`
    was: Slot                # where it was before
    side_by_side: bool       # replaced create-first into the other slot
    line: str                # what preview says ("" when nothing of it changes)


def decide(cfg: StackConfig, m: ModelSpec, where: str, before: Optional[Mapping[str, Any]],
           parts: Mapping[str, str], judge: Callable[[], Fit]) -> Decision:
    """Where model ``m``'s server goes on host ``where`` this `up`, given the last `up`'s record of it."""
    was = str(before.get("slot", "a")) if isinstance(before, Mapping) else "a"
    was = was if was in SLOTS else "a"
    here = slot(cfg, m, was)
    old = before.get("parts") if isinstance(before, Mapping) else None
    if not isinstance(old, Mapping) or dict(old) == dict(parts):
        return Decision(here, here, False, "")
    changed = [k for k in parts if old.get(k) != parts[k]] or ["its server"]
    what = f"models[{m.name}] on {where}: its {', '.join(changed)} changed"
    order = cfg.change_order(m)
    key = f"models[{m.name}].changeOrder" if m.change_order else "vllmChangeOrder"
    if "weights" in changed and m.mounted:
        # the new revision is mounted again in place first (the same path), and Pulumi removes what depends on a
        # resource it re-makes delete-first before it: the old server goes before the new one can start (tried)
        return Decision(here, here, False, f"{what}: stop-first (new weights of a mounted model: its mount is made "
                                           f"again in place first, and {here.container}, which reads through it, goes "
                                           "before it; it finishes what it serves, then the new server starts on the "
                                           "new mount; meanwhile the endpoint answers the model's requests 503 with "
                                           "Retry-After. loadFormat local_copy or runai_streamer change side by side)")
    judged = judge() if order == "auto" else None
    if order == "sideBySide" or (judged is not None and judged.fits):
        there = slot(cfg, m, "b" if was == "a" else "a")
        reason = f"{key} {order}" + (f": {judged.why}" if judged else "")
        return Decision(there, here, True, f"{what}: side by side ({reason}): the new server {there.container} starts on port "
                                     f"{there.port} beside {here.container} (port {here.port}), takes the model's "
                                     "requests once it answers, then the old one finishes what it serves and goes")
    reason = f"{key} {order}" + (f": {judged.why}" if judged else "")
    return Decision(here, here, False, f"{what}: stop-first ({reason}): {here.container} finishes what it serves and "
                                 "stops, then the new server starts; meanwhile the endpoint answers the model's "
                                 "requests 503 with Retry-After. Set " + (
                                     f"{key} sideBySide to start it beside the old one" if order == "auto" else
                                     f"{key} auto or sideBySide to change it side by side"))


def weights_bytes(folder: str) -> int:
    """The model folder's bytes (a Hugging Face cache snapshot's links to its blobs count as the blobs)."""
    return bytes_in(folder)
