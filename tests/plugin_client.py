"""Drives a real provider plugin (the pulumi-command plugin in the project's plugin home) the way the
engine does: start the plugin process, read its port, and call its gRPC ResourceProvider service.
Used by the integration tests that run the mount script as the engine runs it, without a stack."""
from __future__ import annotations

import json
import os
import subprocess
from typing import Any, Optional

import grpc
from google.protobuf import json_format, struct_pb2
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc
from pulumi.runtime.rpc import _special_secret_sig as SECRET_SIG, _special_sig_key as SIG_KEY

from tests.helpers import ROOT, pulumi_env


def plugin_binary(name: str, version: str) -> str:
    """The real plugin bootstrap installed into the project's plugin home."""
    home = pulumi_env().get("PULUMI_HOME") or str(ROOT / ".state" / "pulumi-home")
    path = os.path.join(home, "plugins", f"resource-{name}-v{version}", f"pulumi-resource-{name}")
    if not os.access(path, os.X_OK):
        raise AssertionError(f"no {name} {version} plugin at {path}: run scripts/bootstrap")
    return path


def _plain(value: Any) -> tuple[Any, bool]:
    """A wire value without its secret wrappers, and whether any was secret."""
    if isinstance(value, dict):
        if value.get(SIG_KEY) == SECRET_SIG:
            return _plain(value.get("value"))[0], True
        out, secret = {}, False
        for k, v in value.items():
            out[k], s = _plain(v)
            secret = secret or s
        return out, secret
    if isinstance(value, list):
        items = [_plain(v) for v in value]
        return [v for v, _ in items], any(s for _, s in items)
    return value, False


def decode(struct: Optional[struct_pb2.Struct]) -> tuple[dict[str, Any], set[str]]:
    """A Struct to plain values, and the names of the top-level properties that were secret."""
    if struct is None:
        return {}, set()
    wire = json_format.MessageToDict(struct)
    props, secrets = {}, set()
    for k, v in wire.items():
        props[k], secret = _plain(v)
        if secret:
            secrets.add(k)
    return props, secrets


def encode(props: dict[str, Any], secrets: set[str] = frozenset()) -> struct_pb2.Struct:
    """Plain values to a Struct, wrapping the top-level properties named in ``secrets``."""
    wire = {k: ({SIG_KEY: SECRET_SIG, "value": v} if k in secrets and v is not None else v)
            for k, v in props.items()}
    struct = struct_pb2.Struct()
    json_format.ParseDict(json.loads(json.dumps(wire)), struct)
    return struct


class PluginClient:
    def __init__(self, name: str, version: str) -> None:
        self.proc = subprocess.Popen([plugin_binary(name, version)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        port = int(self.proc.stdout.readline().strip())
        self.stub = provider_pb2_grpc.ResourceProviderStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        self.stub.Configure(provider_pb2.ConfigureRequest(args=encode({}), acceptSecrets=True,
                                                          acceptResources=True))

    @staticmethod
    def urn(token: str, name: str) -> str:
        return f"urn:pulumi:test::proj::{token}::{name}"

    def create(self, token: str, inputs: dict[str, Any], secrets: set[str] = frozenset(), name: str = "r"):
        resp = self.stub.Create(provider_pb2.CreateRequest(urn=self.urn(token, name), type=token,
                                                           properties=encode(inputs, secrets)))
        return resp.id, resp.properties

    def update(self, token: str, id_: str, olds: dict[str, Any], news: dict[str, Any], secrets=frozenset()):
        resp = self.stub.Update(provider_pb2.UpdateRequest(id=id_, urn=self.urn(token, "r"), type=token,
                                                           olds=encode(olds), news=encode(news, secrets),
                                                           old_inputs=encode(olds)))
        return resp.properties

    def delete(self, token: str, id_: str, state: dict[str, Any]) -> None:
        self.stub.Delete(provider_pb2.DeleteRequest(id=id_, urn=self.urn(token, "r"), type=token,
                                                    properties=encode(state), old_inputs=encode(state)))

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
