"""What every target's outputs hold per model: the request an OpenAI client sends, as a curl line,
and vLLM's Prometheus endpoint."""
from __future__ import annotations

from typing import Any

import pulumi

from components.config.spec import StackConfig


def curl(cfg: StackConfig, base_url: pulumi.Output[str], model: str) -> pulumi.Output[str]:
    """The request an OpenAI client sends by default (no temperature: sampled), as a curl line."""
    return base_url.apply(
        lambda url: f"curl -s {url}/completions -H 'Content-Type: application/json'"
                    + (" -H \"Authorization: Bearer $VLLM_API_KEY\"" if cfg.vllm_api_key else "")
                    + f" -d '{{\"model\": \"{model}\", \"prompt\": \"{cfg.smoke_prompt}\", \"max_tokens\": "
                      f"{cfg.smoke_max_tokens}}}'")


def metrics(base_url: pulumi.Output[str]) -> pulumi.Output[str]:
    """vLLM's Prometheus endpoint beside its OpenAI API."""
    return base_url.apply(lambda url: url.removesuffix("/v1") + "/metrics")


def router_outputs(cfg: StackConfig, router: Any) -> dict[str, Any]:
    """The stack's one endpoint (a Docker or Kubernetes router, or None): its base URL, its metrics, its
    models and the request to try through it."""
    if router is None:
        return {}
    return {"endpoint": router.url, "endpoint_metrics": router.metrics_url,
            "endpoint_models": [m.name for m in cfg.models],
            "endpoint_curl": curl(cfg, router.url, cfg.models[0].name)}
