"""Toolchain check: one local command, one container from a locally imported image, and one
Python dynamic resource defined right here (pickled by value), all through the real engine."""
import os

import pulumi
from pulumi.dynamic import CreateResult, Resource, ResourceProvider

from components.resources import CommandResource, ContainerResource

cfg = pulumi.Config()
workdir = cfg.require("workdir")
port = cfg.require_int("port")
stack = pulumi.get_stack()


class MarkerProvider(ResourceProvider):
    def create(self, props):
        with open(props["path"], "w", encoding="utf-8") as fh:
            fh.write(props["text"])
        return CreateResult(props["path"], props)

    def delete(self, id_, props):
        try:
            os.remove(id_)
        except FileNotFoundError:
            pass


class Marker(Resource):
    def __init__(self, name, props, opts=None):
        super().__init__(MarkerProvider(), name, props, opts)


cmd = CommandResource("touch", {
    "create": 'echo "made by $WHO" > "$TARGET"',
    "delete": 'rm -f "$TARGET"',
    "read": 'test -f "$TARGET"',
    "environment": {"TARGET": os.path.join(workdir, "command-made-this"), "WHO": stack},
})
marker = Marker("marker", {"path": os.path.join(workdir, "dynamic-made-this"), "text": "hello"})
container = ContainerResource("web", {
    "name": f"rvllm-toolchain-{stack}",
    "image": cfg.require("image"),
    "entrypoint": ["/usr/local/bin/rclone"],
    "command": ["serve", "http", "/tmp", "--addr", ":8080", "--config", "/dev/null"],
    "labels": {"rustfs-vllm.stack": stack},
    "ports": [{"internal": 8080, "external": port, "ip": "127.0.0.1"}],
    "restart": "no",
    "ready_url": f"http://127.0.0.1:{port}/",
    "ready_timeout": 30,
})
pulumi.export("stdout", cmd.stdout)
pulumi.export("container_id", container.container_id)
