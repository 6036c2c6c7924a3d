"""Dynamic provider: the smoke test through vLLM's OpenAI-compatible API.

Two completions: a greedy one (``temperature: 0``; its text becomes a stack output, the same on every
run) and then one with the OpenAI clients' defaults (no ``temperature``: sampled), the request every
real client sends first; the sampled path compiles kernels on first use, and an engine that cannot
(no compiler in the image) dies there, so `up` fails on it instead of the users' first request.

Runs on create (and again whenever its inputs change, e.g. the container it targets was replaced);
its text becomes a stack output. Nothing runs during preview; delete does nothing.
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any, Optional

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, UpdateResult

from components.providers.base import Provider
from components.dynamic import secret_outputs
from components.errors import ProviderError


def complete(props: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    greedy = post(props, {"temperature": 0})
    post(props, {}, what="sampled (no temperature, as the OpenAI clients send)")
    return {**props, "text": greedy, "seconds": round(time.monotonic() - started, 3)}


def post(props: dict[str, Any], sampling: dict[str, Any], what: str = "") -> str:
    """One completion of the smoke prompt with ``sampling`` parameters; its text."""
    what = f" ({what})" if what else ""
    body = json.dumps({"model": props["model"], "prompt": props["prompt"],
                       "max_tokens": int(props["max_tokens"]), **sampling}).encode()
    headers = {"Content-Type": "application/json", **(props.get("headers") or {})}
    req = urllib.request.Request(f"{props['base_url']}/completions", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=int(props.get("timeout") or 300)) as resp:
            answer = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read(2000).decode("utf-8", "replace")
        raise ProviderError(f"smoke test{what}: POST {props['base_url']}/completions answered HTTP {exc.code}: "
                            f"{detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ProviderError(f"smoke test{what}: POST {props['base_url']}/completions failed: {exc}") from None
    try:
        return answer["choices"][0]["text"]
    except (KeyError, IndexError, TypeError):
        raise ProviderError(f"smoke test{what}: unexpected answer {str(answer)[:500]}") from None


class CompletionProvider(Provider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(f"completion-{props['model']}", complete(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        keys = (set(olds) | set(news)) - {"text", "seconds", "__provider"}
        return DiffResult(changes=any(olds.get(k) != news.get(k) for k in keys), replaces=[])

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(complete(news))


class CompletionResource(Resource, module="rustfs-vllm", name="Completion"):
    text: pulumi.Output[str]
    seconds: pulumi.Output[float]

    def __init__(self, name: str, props: dict[str, Any], opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__(CompletionProvider(), name, {"text": None, "seconds": None, **props}, secret_outputs(opts))
