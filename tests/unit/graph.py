"""Runs the program's Plan (on the config's target) under Pulumi mocks and records every
RegisterResource request (type, name, parent, dependencies, inputs with secrets still marked)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Any

import pulumi
from pulumi.runtime import mocks, rpc


@dataclass
class Registered:
    typ: str
    name: str
    urn: str
    parent: str
    dependencies: list[str]
    inputs: dict[str, Any]          # secrets as rpc secret wrappers
    secret_outputs: list[str]
    provider: str = ""              # explicit provider reference (urn::id), "" for the default one
    retain_on_delete: bool = False

    def plain(self, key: str) -> Any:
        return unwrap(self.inputs.get(key))

    def is_secret(self, key: str) -> bool:
        return rpc.is_rpc_secret(self.inputs.get(key))


def unwrap(value: Any) -> Any:
    if rpc.is_rpc_secret(value):
        return unwrap(value["value"])
    if isinstance(value, dict):
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value


READ_USER, READ_SECRET = "rvreadmockmock00beef", "mock-read-secret-0123456789abcdef0123"   # the mocked read key


class Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        outs = dict(args.inputs)
        if args.typ == "docker:index/remoteImage:RemoteImage":
            outs["imageId"] = f"sha256:mock-{args.inputs['name']}"
        if args.typ == "kubernetes:core/v1:Service":   # what the API server fills in
            outs["spec"] = {**outs.get("spec", {}), "clusterIP": "10.96.0.10"}
        if args.typ == "kubernetes:core/v1:Secret":    # the provider's autonaming (a random suffix)
            meta = outs.get("metadata", {})
            outs["metadata"] = {**meta, "name": meta.get("name") or f"{args.name}-a1b2c3d4"}
        if args.typ.endswith("dynamic/rustfs-vllm:ReadKey"):    # what the provider's create returns
            outs.update(read_access_key=READ_USER, read_secret_key=READ_SECRET)
        if args.typ == "pulumi:pulumi:StackReference":      # a store stack reference (the self one is an invoke)
            return [args.name, {**outs, "outputs": {}, "secretOutputNames": []}]
        if args.typ.endswith("dynamic/rustfs-vllm:Bucket"):
            outs["adopted"] = False
            return [args.inputs["bucket"], outs]  # the provider's id is the bucket name
        return [f"{args.name}-id", outs]

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


class RecordingMonitor(mocks.MockMonitor):
    def __init__(self, m: pulumi.runtime.Mocks) -> None:
        super().__init__(m)
        self.registered: list[Registered] = []

    def RegisterResource(self, request):  # noqa: N802 - gRPC name
        resp = super().RegisterResource(request)
        inputs = rpc.deserialize_properties(request.object, True)
        self.registered.append(Registered(
            typ=request.type, name=request.name, urn=resp.urn, parent=request.parent,
            dependencies=list(request.dependencies), inputs=inputs,
            secret_outputs=list(request.additionalSecretOutputs), provider=request.provider,
            retain_on_delete=bool(request.retainOnDelete)))
        return resp


@dataclass
class Graph:
    resources: list[Registered] = field(default_factory=list)

    def by_type(self, suffix: str) -> list[Registered]:
        return [r for r in self.resources if r.typ.endswith(suffix)]

    def one(self, suffix: str, name_part: str = "") -> Registered:
        found = [r for r in self.by_type(suffix) if name_part in r.name]
        assert len(found) == 1, f"{suffix}/{name_part}: {[r.name for r in found]}"
        return found[0]

    def by_urn(self, urn: str) -> Registered:
        return next(r for r in self.resources if r.urn == urn)

    def ancestors(self, r: Registered) -> list[str]:
        names = []
        while r.parent:
            try:
                r = self.by_urn(r.parent)
            except StopIteration:
                break
            names.append(r.name)
        return names


def build(cfg, stack: str = "dev") -> Graph:
    """Construct the stack (its Plan on the config's target) for ``cfg`` under mocks; return
    what was registered."""
    monitor = RecordingMonitor(Mocks())
    pulumi.runtime.set_mocks(Mocks(), project="rustfs-vllm", stack=stack, preview=False, monitor=monitor)
    from components.core.plan import Plan
    from components.targets import target_for

    holder: dict[str, Any] = {}

    @pulumi.runtime.test
    def construct():
        # as __main__ builds it: the config's target, the one plan
        s = Plan("rustfs-vllm", target_for(cfg))
        holder["stack"] = s
        holder["exports"] = s.exports()
        return pulumi.Output.all(*[x.base_url for x in s.served], *[x.instance for x in s.served],
                                 *[t.text for t in s.smoke.values()])

    construct()
    g = Graph(monitor.registered)
    g.stack = holder["stack"]  # type: ignore[attr-defined]
    return g


def config_from_file(stack: str, tmp_path, mount_path: str, keys: tuple[str, str] = ("urn-test-access-key-0001",
                     "urn-test-secret-0001"), stack_keys: Optional[dict] = None, **model: Any):
    """The stack's Pulumi.<stack>.yaml config (plain keys; test keys where it has none), its first
    model read from a small model made in ``tmp_path`` with ``model``'s fields, at ``mount_path``."""
    import yaml

    from components import config
    from tests.helpers import ROOT, make_model

    raw = {k.split(":", 1)[1]: v for k, v in yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"].items()
           if not isinstance(v, dict)}
    raw.setdefault("rustfsAccessKey", keys[0])
    raw.setdefault("rustfsSecretKey", keys[1])
    make_model(tmp_path / "m")
    raw["models"][0].update(source=str(tmp_path / "m"), **model)
    raw["mountPath"] = mount_path
    raw.update(stack_keys or {})
    return config.load(raw, stack, str(ROOT))
