"""The gRPC side shared by this project's OFFLINE STAND-IN provider plugins.

A stand-in is a small Pulumi resource provider plugin, written here in Python on the SDK's
``ResourceProvider`` gRPC service, that implements exactly the resources and properties this
program uses, under the real provider's package name, version, resource tokens and property
names. It exists for machines that cannot get the real plugin (no GitHub downloads here); it is
not the real provider and says so in its plugin info and in every error it raises.

This module holds what every stand-in needs:

- ``serve(provider)``: start the gRPC server, print the port (the plugin handshake), and exit when
  the engine that started it is gone (a killed ``pulumi`` leaves no stand-in behind);
- value conversion: the wire's ``Struct`` (with secret and unknown sentinels) to plain Python
  values and back, keeping track of which top-level properties were secret;
- ``Resource``: the per-type interface (check, diff, create, read, update, delete);
- the engine's log (``log_status``) so long operations show progress in ``pulumi up``.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import grpc
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime.proto import engine_pb2, engine_pb2_grpc, plugin_pb2, provider_pb2, provider_pb2_grpc

SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
SIG_KEY = "4dabf18193072939515e22adb298388d"
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


class ProviderError(Exception):
    """An error meant for the user: shown by `pulumi` as it is, without a traceback."""


class Unimplemented(ProviderError):
    """A resource type or function this stand-in does not implement."""


# --------------------------------------------------------------------------- values
def _plain(value: Any) -> tuple[Any, bool]:
    """(value without secret wrappers, whether a secret was inside)."""
    if isinstance(value, dict):
        if value.get(SIG_KEY) == SECRET_SIG:
            inner, _ = _plain(value.get("value"))
            return inner, True
        out, secret = {}, False
        for k, v in value.items():
            out[k], s = _plain(v)
            secret = secret or s
        return out, secret
    if isinstance(value, list):
        items = [_plain(v) for v in value]
        return [v for v, _ in items], any(s for _, s in items)
    if isinstance(value, float) and value.is_integer():
        return int(value), False
    return value, False


def decode(struct: Optional[struct_pb2.Struct]) -> tuple[dict[str, Any], set[str]]:
    """Properties as plain values, and the names of the top-level ones that hold a secret."""
    if struct is None:
        return {}, set()
    raw = json_format.MessageToDict(struct)
    props: dict[str, Any] = {}
    secrets: set[str] = set()
    for key, value in raw.items():
        props[key], secret = _plain(value)
        if secret:
            secrets.add(key)
    return props, secrets


def encode(props: dict[str, Any], secrets: set[str] = frozenset()) -> struct_pb2.Struct:
    """Plain values to a Struct, wrapping the top-level properties named in ``secrets``."""
    wire = {k: ({SIG_KEY: SECRET_SIG, "value": v} if k in secrets and v is not None else v)
            for k, v in props.items()}
    struct = struct_pb2.Struct()
    json_format.ParseDict(json.loads(json.dumps(wire)), struct)
    return struct


def has_unknowns(value: Any) -> bool:
    if value == UNKNOWN:
        return True
    if isinstance(value, dict):
        return any(has_unknowns(v) for v in value.values())
    if isinstance(value, list):
        return any(has_unknowns(v) for v in value)
    return False


def canonical(value: Any, unordered: bool = False) -> str:
    """A comparable form; ``unordered`` treats a list as a set (Terraform's TypeSet)."""
    if unordered and isinstance(value, list):
        return json.dumps(sorted(canonical(v) for v in value))
    return json.dumps(value, sort_keys=True)


# --------------------------------------------------------------------------- resources
@dataclass
class DiffResult:
    updates: list[str] = field(default_factory=list)     # properties changed in place
    replaces: list[str] = field(default_factory=list)    # properties whose change replaces
    delete_before_replace: bool = False


@dataclass
class Context:
    """What a resource method gets besides its properties."""
    urn: str
    preview: bool
    config: dict[str, Any]
    log: Callable[[str], None]


class Resource:
    """One resource type of a stand-in provider. Properties are the wire (camelCase) names."""

    token = ""

    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        return news, []

    def diff(self, id_: str, olds: dict[str, Any], old_inputs: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        raise NotImplementedError

    def create(self, ctx: Context, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def read(self, ctx: Context, id_: str, state: dict[str, Any],
             inputs: dict[str, Any]) -> Optional[tuple[str, dict[str, Any], dict[str, Any]]]:
        """(id, state, inputs) as they are now, or None when the thing is gone."""
        return id_, state, inputs

    def update(self, ctx: Context, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def delete(self, ctx: Context, id_: str, state: dict[str, Any]) -> None:
        return None

    def output_secrets(self, outputs: dict[str, Any], input_secrets: set[str]) -> set[str]:
        """Which outputs are secret: by default the ones whose input was (as the engine does)."""
        return {k for k in outputs if k in input_secrets}


def _type_of(request: Any) -> str:
    token = getattr(request, "type", "") or ""
    if token:
        return token
    # urn:pulumi:stack::project::parent$type::name
    parts = request.urn.split("::")
    return parts[2].split("$")[-1] if len(parts) >= 4 else ""


class Servicer(provider_pb2_grpc.ResourceProviderServicer):
    def __init__(self, name: str, version: str, resources: list[Resource], engine: str,
                 configure: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.name = name
        self.version = version
        self.resources = {r.token: r for r in resources}
        self.engine_address = engine
        self.config: dict[str, Any] = {}
        self._configure = configure
        self._engine: Any = None

    # ---- helpers
    def _resource(self, request: Any, context: Any) -> Resource:
        token = _type_of(request)
        res = self.resources.get(token)
        if res is None:
            raise Unimplemented(f"{token}: not implemented by the offline stand-in plugin for {self.name} {self.version} "
                          f"(it implements {', '.join(sorted(self.resources))}); install the real plugin")
        return res

    def _log(self, urn: str) -> Callable[[str], None]:
        def log(message: str) -> None:
            try:
                if self._engine is None and self.engine_address:
                    self._engine = engine_pb2_grpc.EngineStub(grpc.insecure_channel(self.engine_address))
                if self._engine is not None:
                    self._engine.Log(engine_pb2.LogRequest(severity=engine_pb2.INFO, message=message, urn=urn,
                                                           ephemeral=True))
            except Exception:  # noqa: BLE001 - progress is best effort
                pass
        return log

    def _ctx(self, urn: str, preview: bool) -> Context:
        return Context(urn=urn, preview=preview, config=self.config, log=self._log(urn))

    @staticmethod
    def _guard(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: "Servicer", request: Any, context: Any) -> Any:
            try:
                return fn(self, request, context)
            except Unimplemented as exc:
                context.abort(grpc.StatusCode.UNIMPLEMENTED, str(exc))
            except ProviderError as exc:
                context.abort(grpc.StatusCode.UNKNOWN, str(exc))
            except Exception as exc:  # noqa: BLE001
                context.abort(grpc.StatusCode.UNKNOWN,
                              f"{self.name} stand-in plugin: {exc}\n{traceback.format_exc(limit=3)}")
        return wrapper

    # ---- plugin-level calls
    def GetPluginInfo(self, request, context):
        return plugin_pb2.PluginInfo(version=self.version)

    def Handshake(self, request, context):
        if request.engine_address:
            self.engine_address = request.engine_address
        return provider_pb2.ProviderHandshakeResponse(accept_secrets=True, accept_resources=True)

    def GetSchema(self, request, context):
        context.abort(grpc.StatusCode.UNIMPLEMENTED, f"the offline stand-in for {self.name} has no schema")

    def CheckConfig(self, request, context):
        return provider_pb2.CheckResponse(inputs=request.news)

    def DiffConfig(self, request, context):
        olds, _ = decode(request.olds)
        news, _ = decode(request.news)
        changed = [k for k in set(olds) | set(news) if k != "version" and olds.get(k) != news.get(k)]
        return provider_pb2.DiffResponse(
            changes=provider_pb2.DiffResponse.DIFF_SOME if changed else provider_pb2.DiffResponse.DIFF_NONE,
            diffs=changed)

    def Configure(self, request, context):
        config, _ = decode(request.args)
        if not config and request.variables:
            prefix = f"{self.name}:config:"
            config = {k[len(prefix):]: v for k, v in request.variables.items() if k.startswith(prefix)}
        self.config = config
        if self._configure:
            self._configure(config)
        return provider_pb2.ConfigureResponse(acceptSecrets=True, supportsPreview=True, acceptResources=True)

    def Cancel(self, request, context):
        return empty_pb2.Empty()

    def Invoke(self, request, context):
        context.abort(grpc.StatusCode.UNIMPLEMENTED,
                      f"{request.tok}: functions are not implemented by the offline stand-in for {self.name}")

    # ---- resource calls
    @_guard
    def Check(self, request, context):
        res = self._resource(request, context)
        olds, _ = decode(request.olds)
        news, secrets = decode(request.news)
        inputs, failures = res.check(olds, news)
        return provider_pb2.CheckResponse(
            inputs=encode(inputs, secrets),
            failures=[provider_pb2.CheckFailure(property=p, reason=r) for p, r in failures])

    @_guard
    def Diff(self, request, context):
        res = self._resource(request, context)
        olds, _ = decode(request.olds)
        old_inputs, _ = decode(request.old_inputs)
        news, _ = decode(request.news)
        result = res.diff(request.id, olds, old_inputs or olds, news)
        ignore = set(request.ignoreChanges)
        updates = [k for k in result.updates if k not in ignore]
        replaces = [k for k in result.replaces if k not in ignore]
        detailed = {k: provider_pb2.PropertyDiff(kind=provider_pb2.PropertyDiff.UPDATE, inputDiff=True) for k in updates}
        detailed.update({k: provider_pb2.PropertyDiff(kind=provider_pb2.PropertyDiff.UPDATE_REPLACE, inputDiff=True)
                         for k in replaces})
        changed = sorted(set(updates) | set(replaces))
        return provider_pb2.DiffResponse(
            changes=provider_pb2.DiffResponse.DIFF_SOME if changed else provider_pb2.DiffResponse.DIFF_NONE,
            replaces=sorted(replaces), diffs=changed, detailedDiff=detailed, hasDetailedDiff=True,
            deleteBeforeReplace=bool(replaces) and result.delete_before_replace)

    @_guard
    def Create(self, request, context):
        res = self._resource(request, context)
        inputs, secrets = decode(request.properties)
        id_, outs = res.create(self._ctx(request.urn, request.preview), inputs)
        return provider_pb2.CreateResponse(id=id_, properties=encode(outs, res.output_secrets(outs, secrets)))

    @_guard
    def Read(self, request, context):
        res = self._resource(request, context)
        state, state_secrets = decode(request.properties)
        inputs, input_secrets = decode(request.inputs)
        got = res.read(self._ctx(request.urn, False), request.id, state, inputs)
        if got is None:
            return provider_pb2.ReadResponse(id="")
        id_, new_state, new_inputs = got
        return provider_pb2.ReadResponse(
            id=id_, properties=encode(new_state, res.output_secrets(new_state, state_secrets | input_secrets)),
            inputs=encode(new_inputs, input_secrets))

    @_guard
    def Update(self, request, context):
        res = self._resource(request, context)
        olds, _ = decode(request.olds)
        news, secrets = decode(request.news)
        outs = res.update(self._ctx(request.urn, request.preview), request.id, olds, news)
        return provider_pb2.UpdateResponse(properties=encode(outs, res.output_secrets(outs, secrets)))

    @_guard
    def Delete(self, request, context):
        res = self._resource(request, context)
        state, _ = decode(request.properties)
        res.delete(self._ctx(request.urn, False), request.id, state)
        return empty_pb2.Empty()


def _exit_with_parent() -> None:
    """The engine starts each plugin as its child: when it is gone (a killed `pulumi`), so are we."""
    parent = os.getppid()
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(0)


def serve(name: str, version: str, resources: list[Resource],
          configure: Callable[[dict[str, Any]], None] | None = None) -> None:
    engine = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8),
                         options=[("grpc.max_receive_message_length", 400 * 1024 * 1024)])
    provider_pb2_grpc.add_ResourceProviderServicer_to_server(
        Servicer(name, version, resources, engine, configure), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    sys.stdout.write(f"{port}\n")
    sys.stdout.flush()
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    try:
        server.wait_for_termination()
    except KeyboardInterrupt:
        server.stop(0)
