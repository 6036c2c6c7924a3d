"""Balancer: one OpenAI-compatible entry point per model, spreading its requests over the model's
hosts. One nginx container on this machine (the program's host), declared with pulumi-docker, with
host networking so it reaches every host's published port; per model a ``server`` on
``<bindAddress>:<balancerPort>`` proxying to an ``upstream`` of that model's base URLs.

A host that is down: nginx's connection to it fails (refused, closed before any answer, or no
answer within 3 s), nginx sends the same request to the next host (``proxy_next_upstream error
timeout non_idempotent``; a request is tried on each host at most once) and leaves the failed host
out for 10 s (``max_fails=1 fail_timeout=10s``), so clients see no error while at least one host
serves. ``non_idempotent`` because a vLLM whose container is restarting sits behind Docker's port
proxy, which accepts the connection and then closes it: the POST was "sent", and without it nginx
answered 502 (measured: 19 of 1,305 requests under load while one host's vLLM restarted). An
inference request changes nothing, so sending it again to another host is safe; for that nginx
keeps the request body (request buffering on; bodies are small JSON). A request a host answered
with an error status is passed through as it is (vLLM's own errors are not retried), and a
response that already started (a stream cut off by a dying vLLM) cannot be retried. Streaming
responses pass unbuffered.

The configuration is a file uploaded into the container (pulumi-docker ``uploads``), so a change of
a model's hosts or ports replaces the container (a second or two without the entry point); the
models' servers are not touched.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

import pulumi
import pulumi_docker as docker

from components.serving.readiness import ReadinessWait, ReadinessWaitArgs
from components.serving.labels import labels

CONFIG = "/etc/rustfs-vllm/nginx.conf"


@dataclass(frozen=True)
class Route:
    model: str                      # served model name
    port: int                       # the entry point's port on this machine
    upstreams: Sequence[str]        # host:port of every host serving the model


@dataclass
class BalancerArgs:
    stack: str
    container_name: str
    image: str
    bind_address: str
    routes: Sequence[Route]
    ready_timeout: int = 120


def nginx_conf(routes: Sequence[Route], bind_address: str) -> str:
    """The whole nginx.conf: one upstream and one server per model."""
    blocks = []
    for r in routes:
        name = "m_" + re.sub(r"[^A-Za-z0-9_]", "_", r.model)
        servers = "\n".join(f"        server {u} max_fails=1 fail_timeout=10s;" for u in r.upstreams)
        blocks.append(f"""    upstream {name} {{
{servers}
        keepalive 16;
    }}
    server {{
        listen {bind_address}:{r.port};
        location / {{
            proxy_pass http://{name};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_buffering off;
            proxy_connect_timeout 3s;
            proxy_read_timeout 600s;
            proxy_send_timeout 600s;
            proxy_next_upstream error timeout non_idempotent;
            proxy_next_upstream_tries {len(r.upstreams)};
            client_max_body_size 16m;
        }}
    }}""")
    return f"""# made by rustfs-vllm: one entry point per model over its hosts
worker_processes 1;
pid /tmp/nginx.pid;
error_log stderr warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path /tmp/client_body;
    proxy_temp_path /tmp/proxy;
{chr(10).join(blocks)}
}}
"""


class Balancer(pulumi.ComponentResource):
    urls: dict[str, pulumi.Output[str]]

    def __init__(self, name: str, args: BalancerArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:serving:Balancer", name, None, opts)
        conf = nginx_conf(args.routes, args.bind_address)
        self.image = docker.RemoteImage(f"{name}-image", docker.RemoteImageArgs(name=args.image, keep_locally=True),
                                        pulumi.ResourceOptions(parent=self))
        self.container = docker.Container(f"{name}-container", docker.ContainerArgs(
            name=args.container_name,
            image=self.image.image_id,
            command=["nginx", "-c", CONFIG, "-g", "daemon off;"],
            network_mode="host",
            uploads=[docker.ContainerUploadArgs(file=CONFIG, content=conf, permissions="0444")],
            # host networking publishes nothing: the label tells preview's port check these are ours
            labels=labels(args.stack, "balancer", ports=",".join(str(r.port) for r in args.routes)),
            restart="unless-stopped",
        ), pulumi.ResourceOptions(parent=self, delete_before_replace=True,
                                  depends_on=opts.depends_on if opts else None))
        host = "127.0.0.1" if args.bind_address in ("0.0.0.0", "127.0.0.1") else args.bind_address
        self.waits = [ReadinessWait(f"{name}-{r.port}-ready", ReadinessWaitArgs(
            container_id=self.container.id, container_name=args.container_name,
            url=f"http://{host}:{r.port}/v1/models", contains=f'"{r.model}"', timeout=args.ready_timeout),
            pulumi.ResourceOptions(parent=self)) for r in args.routes]
        self.urls = {r.model: pulumi.Output.from_input(f"http://{host}:{r.port}/v1") for r in args.routes}
        self.register_outputs({"urls": self.urls})
