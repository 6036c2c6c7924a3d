"""Plan: the stack's root component, one for every target.

    target's S3 server -> Store (credential check, bucket, uploads) -> target serves each model
    -> per server: SmokeTest -> outputs (the core's and the target's)

The root's inputs are the stack's policy facts (components.core.policy_facts), for the policy pack.

The root's type is the target's (``rustfs-vllm:index:ServingStack`` on Docker hosts,
``rustfs-vllm:index:KubeStack`` on Kubernetes: the types deployed stacks were made with), so every
URN stays as it was when each target built its own stack.
"""
from __future__ import annotations

from typing import Any, Optional

import pulumi

from components.core import deletions, policy_facts
from components.core.smoke import SmokeTest, SmokeTestArgs
from components.config.runtime import stack_fqn
from components.core.store import build_platform, build_store
from components.core.target import Keys, Served, Store, Target
from components.core.tenants import tenants_export


class Plan(pulumi.ComponentResource):
    def __init__(self, name: str, target: Target, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        # its inputs are the stack's policy facts: what policy/ judges the stack by (no secret among them)
        super().__init__(target.component_type, name, {"policyFacts": policy_facts.facts(target.cfg)}, opts)
        cfg = self.cfg = target.cfg
        self.target = target
        keys = Keys(pulumi.Output.secret(cfg.access_key), pulumi.Output.secret(cfg.secret_key))
        if cfg.role == "store":      # a platform stack: the store for serving stacks, nothing served
            self.store: Store = build_platform(self, cfg, target.s3_server(self, keys), keys)
            self.served: list[Served] = []
        else:
            self.store = build_store(self, cfg, target.s3_server(self, keys), keys)
            self.served = target.serve(self, self.store, self.store.read_keys)
        self.smoke: dict[tuple[str, Optional[str]], SmokeTest] = {}
        if cfg.smoke_test:
            for s in self.served:
                self.smoke[(s.model, s.place)] = SmokeTest(f"{s.name_prefix}smoke-{self._prefix(s.model)}", SmokeTestArgs(
                    base_url=s.base_url, model=s.model, container_id=s.instance, prompt=cfg.smoke_prompt,
                    max_tokens=cfg.smoke_max_tokens, api_key=pulumi.Output.secret(cfg.vllm_api_key)),
                    pulumi.ResourceOptions(parent=self, depends_on=s.ready))
        self.register_outputs({})

    def _prefix(self, model: str) -> str:
        return next(m.prefix for m in self.cfg.models if m.name == model)

    def exports(self) -> dict[str, Any]:
        """The stack's outputs: what `pulumi stack output` shows."""
        store = self.store
        if self.cfg.role == "store":
            return self.store_exports()
        out: dict[str, Any] = {"s3_server": store.server.kind, "s3_endpoint": store.server.endpoint,
                               "bucket": store.bucket.name, "bucket_adopted": store.bucket.adopted,
                               "read_keys": store.read_keys_note,
                               # where each model's objects are: the next run says what leaves (deletions.py)
                               deletions.OUTPUT: deletions.stored(self.cfg),
                               **self.target.outputs(store)}
        if self.cfg.smoke_test:
            out["smoke_completions"] = self.smoke_completions()
        return out

    def store_exports(self) -> dict[str, Any]:
        """A platform stack's outputs: what a serving stack's ``store`` reads (components/config/store_ref.py).
        No key: every stack that reads them holds them all in its state (scripts/tenant-key hands each
        tenant its own)."""
        cfg, store = self.cfg, self.store
        ca = open(cfg.ca_bundle, encoding="utf-8").read() if cfg.ca_bundle else ""
        return {"role": "store", "s3_server": store.server.kind, "s3_endpoint": store.server.endpoint,
                "bucket": store.bucket.name, "store_stack": stack_fqn(), "store_endpoint": cfg.rustfs_endpoint,
                "store_bucket": store.bucket.name, "store_ca": ca, "store_tenants": tenants_export(cfg)}

    def smoke_completions(self) -> dict[str, Any]:
        """{model: text}, or {model: {place: text}} where a model runs at several named places."""
        if all(place is None for _, place in self.smoke):
            return {model: t.text for (model, _), t in self.smoke.items()}
        out: dict[str, dict[str, Any]] = {}
        for (model, place), t in self.smoke.items():
            out.setdefault(model, {})[str(place)] = t.text
        return out
