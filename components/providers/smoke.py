"""Dynamic provider: one completion through vLLM's OpenAI-compatible API (the smoke test).

Runs on create (and again whenever its inputs change, e.g. the container it targets was replaced);
its text becomes a stack output. Nothing runs during preview; delete does nothing.
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider, UpdateResult

from .errors import ProviderError


def complete(props: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps({"model": props["model"], "prompt": props["prompt"],
                       "max_tokens": int(props["max_tokens"]), "temperature": 0}).encode()
    headers = {"Content-Type": "application/json", **(props.get("headers") or {})}
    req = urllib.request.Request(f"{props['base_url']}/completions", data=body, headers=headers, method="POST")
    started = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=int(props.get("timeout") or 300)) as resp:
            answer = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read(2000).decode("utf-8", "replace")
        raise ProviderError(f"smoke test: POST {props['base_url']}/completions answered HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ProviderError(f"smoke test: POST {props['base_url']}/completions failed: {exc}") from None
    try:
        text = answer["choices"][0]["text"]
    except (KeyError, IndexError, TypeError):
        raise ProviderError(f"smoke test: unexpected answer {str(answer)[:500]}") from None
    return {**props, "text": text, "seconds": round(time.monotonic() - started, 3)}


class CompletionProvider(ResourceProvider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(f"completion-{props['model']}", complete(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        keys = (set(olds) | set(news)) - {"text", "seconds", "__provider"}
        return DiffResult(changes=any(olds.get(k) != news.get(k) for k in keys), replaces=[])

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(complete(news))
