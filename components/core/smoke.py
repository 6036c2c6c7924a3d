"""SmokeTest: one completion through the OpenAI-compatible API once the server is ready."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi

from components.providers.smoke import CompletionResource


@dataclass
class SmokeTestArgs:
    base_url: pulumi.Input[str]
    model: str
    container_id: pulumi.Input[str]
    prompt: str = "RustFS is"
    max_tokens: int = 12
    api_key: pulumi.Input[str] = ""


class SmokeTest(pulumi.ComponentResource):
    text: pulumi.Output[str]

    def __init__(self, name: str, args: SmokeTestArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:serving:SmokeTest", name, None, opts)
        headers = pulumi.Output.secret(pulumi.Output.from_input(args.api_key).apply(
            lambda k: {"Authorization": f"Bearer {k}"} if k else {}))
        self.completion = CompletionResource(f"{name}-completion", {
            "base_url": args.base_url, "model": args.model, "prompt": args.prompt, "max_tokens": args.max_tokens,
            "headers": headers, "target": args.container_id, "timeout": 300,
        }, pulumi.ResourceOptions(parent=self, depends_on=opts.depends_on if opts else None))
        self.text = self.completion.text
        self.register_outputs({"text": self.text})
