"""Drives this project's offline stand-in plugins the way the engine does: start the plugin
process, read its port, and call its gRPC ResourceProvider service."""
from __future__ import annotations

import subprocess
import sys
from typing import Any

import grpc
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

from standins.plugin import decode, encode
from tests.helpers import ROOT


class PluginClient:
    def __init__(self, module: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", module], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        port = int(self.proc.stdout.readline().strip())
        self.stub = provider_pb2_grpc.ResourceProviderStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        self.stub.Configure(provider_pb2.ConfigureRequest(args=encode({}), acceptSecrets=True))

    @staticmethod
    def urn(token: str, name: str) -> str:
        return f"urn:pulumi:test::proj::{token}::{name}"

    def check(self, token: str, news: dict[str, Any], secrets: set[str] = frozenset()):
        resp = self.stub.Check(provider_pb2.CheckRequest(urn=self.urn(token, "r"), type=token, olds=encode({}),
                                                          news=encode(news, secrets)))
        return decode(resp.inputs)[0], [(f.property, f.reason) for f in resp.failures]

    def diff(self, token: str, olds: dict[str, Any], news: dict[str, Any]):
        return self.stub.Diff(provider_pb2.DiffRequest(id="x", urn=self.urn(token, "r"), type=token, olds=encode(olds),
                                                        old_inputs=encode(olds), news=encode(news)))

    def create(self, token: str, inputs: dict[str, Any], secrets: set[str] = frozenset(), preview: bool = False,
               name: str = "r"):
        resp = self.stub.Create(provider_pb2.CreateRequest(urn=self.urn(token, name), type=token,
                                                           properties=encode(inputs, secrets), preview=preview))
        return resp.id, resp.properties

    def read(self, token: str, id_: str, state: dict[str, Any]):
        resp = self.stub.Read(provider_pb2.ReadRequest(id=id_, urn=self.urn(token, "r"), type=token,
                                                       properties=encode(state), inputs=encode(state)))
        return resp.id, decode(resp.properties)[0], decode(resp.inputs)[0]

    def update(self, token: str, id_: str, olds: dict[str, Any], news: dict[str, Any], secrets=frozenset()):
        resp = self.stub.Update(provider_pb2.UpdateRequest(id=id_, urn=self.urn(token, "r"), type=token,
                                                           olds=encode(olds), news=encode(news, secrets),
                                                           old_inputs=encode(olds)))
        return resp.properties

    def delete(self, token: str, id_: str, state: dict[str, Any]) -> None:
        self.stub.Delete(provider_pb2.DeleteRequest(id=id_, urn=self.urn(token, "r"), type=token,
                                                    properties=encode(state)))

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()

