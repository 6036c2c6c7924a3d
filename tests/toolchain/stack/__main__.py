"""Toolchain check: one pulumi-command local.Command, one pulumi-docker RemoteImage + Container from
a locally imported image, and one Python dynamic resource defined right here (pickled by value),
all through the real engine and whichever docker/command plugins this machine has."""
import os

import pulumi
from pulumi.dynamic import CreateResult, Resource, ResourceProvider

import pulumi_command as command
import pulumi_docker as docker

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


cmd = command.local.Command(
    "touch",
    create='echo "made by $WHO" > "$TARGET" && cat "$TARGET"',
    delete='rm -f "$TARGET"',
    environment={"TARGET": os.path.join(workdir, "command-made-this"), "WHO": stack})
marker = Marker("marker", {"path": os.path.join(workdir, "dynamic-made-this"), "text": "hello"})
image = docker.RemoteImage("image", name=cfg.require("image"), keep_locally=True)
container = docker.Container(
    "web",
    name=f"rvllm-toolchain-{stack}",
    image=image.image_id,
    entrypoints=["/usr/local/bin/rclone"],
    command=["serve", "http", "/tmp", "--addr", ":8080", "--config", "/dev/null"],
    labels=[docker.ContainerLabelArgs(label="rustfs-vllm.stack", value=stack)],
    ports=[docker.ContainerPortArgs(internal=8080, external=port, ip="127.0.0.1")],
    opts=pulumi.ResourceOptions(delete_before_replace=True))
pulumi.export("stdout", cmd.stdout)
pulumi.export("container_id", container.id)
