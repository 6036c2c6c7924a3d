"""Router: the stack's one OpenAI endpoint on this machine (the program's host), over every model on every
host. Two containers of one image (``routerImage``, vllm-router from PyPI and Debian's nginx-light),
declared with pulumi-docker, with host networking so they reach every host's published ports:

- ``<namePrefix>-router``: vLLM's router, ``vllm-router --enable-igw`` (Inference-Gateway mode: routes by
  the request's ``model``), on 127.0.0.1:<routerPort+1>, its Prometheus metrics on 127.0.0.1:<routerPort+2>,
  health checks every 2 s; its image's wrapper registers the workers again after a restart;
- ``<namePrefix>-endpoint``: nginx on <bindAddress>:<routerPort>, the only door (router_conf.py says why).

The router's worker API has no authentication; the image's wrapper guards the router's two loopback ports in
the host's OUTPUT chain before the router starts (scripts/images/vllm-router/rustfs-vllm-router): no process
but root's reaches them, so no unprivileged process on this machine can add or remove a worker. The stack's
own steps reach the API through ``docker exec`` into the router's container (router_sync.RouterApi).

The routes (``{model: [server URL, ...]}``) are the input of one pulumi-command command, ``router-routes``,
which runs ``scripts/router-routes`` (router_sync.py): a change of models, hosts or names is an update of
that command, shown by preview as the change of its RV_ROUTES, and applied through the router's worker
API and ``nginx -s reload``: neither container is replaced or restarted. The API key reaches it on stdin.
A new container (a new image) runs the command again (its ids are triggers).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from components.paths import SCRIPTS
from components.serving import router_conf, router_sync
from components.serving.labels import labels

@dataclass
class RouterArgs:
    stack: str
    name_prefix: str
    image: str
    bind_address: str
    port: int
    policy: str
    routes: Mapping[str, Sequence[str]]       # served model name -> its servers' base URLs (no /v1)
    api_key: pulumi.Input[str] = ""
    ready_timeout: int = 120


def route_changes(container: str, ports: router_conf.Ports, routes: Mapping[str, Sequence[str]]) -> list[str]:
    """What this update changes in the running router's routes, one line each (preview says them); nothing
    when no router of this stack answers on its port (a first `up`: everything is new). Asked inside the router's
    container (its port is guarded on the host)."""
    code, text = router_sync.RouterApi(container, ports.router, timeout=5).call("GET", "/workers")
    if code != 200:
        return []
    try:
        have = {(w.get("model_id", ""), w.get("url", "")) for w in json.loads(text).get("workers", [])}
    except (ValueError, AttributeError):
        return []
    want = {(w["model_id"], w["url"]) for w in router_conf.workers(routes)}
    return [f"router: route {m} -> {u} {what}" for what, pairs in (("added", want - have), ("removed", have - want))
            for m, u in sorted(pairs)]


class Router(pulumi.ComponentResource):
    url: pulumi.Output[str]

    def __init__(self, name: str, args: RouterArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:serving:Router", name, None, opts)
        ports = router_conf.Ports(args.bind_address, args.port, args.port + 1, args.port + 2)
        child = pulumi.ResourceOptions(parent=self)
        self.image = docker.RemoteImage(f"{name}-image", docker.RemoteImageArgs(name=args.image, keep_locally=True),
                                        child)
        port_label = ",".join(str(p) for p in (ports.port, ports.router, ports.metrics))
        # the image's wrapper guards the router's loopback ports before it starts (only root's processes reach
        # them: issue 57), so the container may change the host's OUTPUT chain; vllm-router itself may not
        self.router = docker.Container(f"{name}-container", docker.ContainerArgs(
            name=f"{args.name_prefix}-router", image=self.image.image_id,
            command=router_conf.router_argv(args.policy, ports),
            network_mode="host", restart="unless-stopped", envs=["RV_ROUTER_GUARD=1"],
            capabilities=docker.ContainerCapabilitiesArgs(adds=["CAP_NET_ADMIN"]),
            # stopped (SIGTERM) before it is removed: the wrapper takes its guard rules out as the router ends
            # (a forced removal kills it, and the rules of its ports would outlive it: seen in the first run)
            destroy_grace_seconds=20,
            labels=labels(args.stack, "router", ports=port_label),
        ), pulumi.ResourceOptions(parent=self, delete_before_replace=True))
        # the endpoint starts with no route (an empty list); router-routes writes the stack's
        # nginx's workers run as root (the router guard lets only root's processes reach the router) in a container
        # with no capability but switching to that user (and a port below 1024 where routerPort is one): no raw
        # sockets on the host's network, no files of others
        # (named as the engine names them, sorted: a refresh reads them back so, and another spelling is a diff)
        keep = sorted(["CAP_SETUID", "CAP_SETGID", *(["CAP_NET_BIND_SERVICE"] if ports.port < 1024 else [])])
        self.front = docker.Container(f"{name}-endpoint", docker.ContainerArgs(
            name=f"{args.name_prefix}-endpoint", image=self.image.image_id,
            command=["nginx", "-c", router_conf.CONF_PATH, "-g", "daemon off;"],
            network_mode="host", restart="unless-stopped",
            capabilities=docker.ContainerCapabilitiesArgs(drops=["ALL"], adds=keep),
            uploads=[docker.ContainerUploadArgs(file=router_conf.CONF_PATH, permissions="0600",
                                                content=router_conf.nginx_conf({}, ports, workers_root=True))],
            labels=labels(args.stack, "endpoint", ports=port_label),
            # the uploaded conf only starts nginx (router-routes writes the stack's at once): a new text of it
            # (a new version of the program) must not replace the running endpoint
        ), pulumi.ResourceOptions(parent=self, delete_before_replace=True, ignore_changes=["uploads"]))
        host = router_conf.reach(args.bind_address)
        self.routes = command.local.Command(f"{name}-routes", command.local.CommandArgs(
            create=f"{SCRIPTS}/router-routes",
            environment={"RV_ROUTES": router_conf.routes_json(args.routes),
                         "RV_ROUTER": f"{args.name_prefix}-router", "RV_FRONT": f"{args.name_prefix}-endpoint",
                         "RV_BIND": args.bind_address, "RV_PORT": str(ports.port),
                         "RV_ROUTER_PORT": str(ports.router), "RV_METRICS_PORT": str(ports.metrics),
                         # the conf's own text (a new version of the program): written again when it changes
                         "RV_CONF_TEXT": conf_version(ports)},
            stdin=pulumi.Output.secret(pulumi.Output.from_input(args.api_key).apply(lambda k: f"{k}\n")),
            triggers=[self.router.id, self.front.id],
        ), pulumi.ResourceOptions(parent=self, depends_on=opts.depends_on if opts else None))
        if pulumi.runtime.is_dry_run():
            for line in route_changes(f"{args.name_prefix}-router", ports, args.routes):
                pulumi.log.info(line, resource=self.routes)
        self.url = pulumi.Output.from_input(f"http://{host}:{ports.port}/v1")
        self.metrics_url = pulumi.Output.from_input(f"http://{host}:{ports.port}/metrics")
        self.register_outputs({"url": self.url, "metrics_url": self.metrics_url})


def conf_version(ports: router_conf.Ports) -> str:
    """A digest of the endpoint's nginx.conf as this program writes it (no routes, no key): router-routes runs
    again when a new version of the program writes another conf, so a stack's endpoint takes it at the next up."""
    return hashlib.sha256(router_conf.nginx_conf({}, ports, workers_root=True).encode()).hexdigest()[:16]
