"""rustfs-vllm: RustFS bucket -> rclone FUSE mount -> vLLM, as one Pulumi program.

Thin on purpose: read and validate the configuration, run preflight on the machines (both fail
before anything is registered, naming the key), build the ServingStack (Docker hosts) or the
KubeStack (target kubernetes), export its outputs.
"""
import os

import pulumi

from components import config, preflight
from components.config import runtime
from components.hosts.types import hosts_of
from components.kube import preflight as kube_preflight
from components.kube.stack import KubeStack, KubeStackArgs
from components.stack import ServingStack, ServingStackArgs

PROJECT = os.path.dirname(os.path.abspath(__file__))

raw, problems = runtime.read_raw()
try:
    cfg = config.load(raw, runtime.stack_name(), PROJECT)
except config.ConfigError as exc:
    raise pulumi.RunError(str(config.ConfigError(problems + exc.problems))) from None
if cfg.kube:   # target kubernetes: the cluster places, mounts and serves (components.kube)
    problems += kube_preflight.check(cfg)
    if problems:
        raise pulumi.RunError(str(config.ConfigError(problems)))
    stack: ServingStack | KubeStack = KubeStack("rustfs-vllm", KubeStackArgs(config=cfg))
else:
    # what `up` would fail on once started (ports, images, FUSE, TLS, SSH, GPUs, names), before anything is made
    hosts = hosts_of(cfg)    # one list (and one write of the SSH files) for preflight and the stack
    problems += preflight.check(cfg, preflight.Machines(cfg, hosts))
    if problems:
        raise pulumi.RunError(str(config.ConfigError(problems)))
    stack = ServingStack("rustfs-vllm", ServingStackArgs(config=cfg, hosts=hosts))
for name, value in stack.exports().items():
    pulumi.export(name, value)
