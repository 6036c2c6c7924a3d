"""rustfs-vllm: RustFS bucket -> rclone FUSE mount -> vLLM, as one Pulumi program.

Thin on purpose: read and validate the configuration, pick its target (Docker hosts or Kubernetes,
components.targets), run the target's preflight on the machines (both fail before anything is
registered, naming the key), build the one plan (components.core.plan), export its outputs.
"""
import os

import pulumi

from components import config
from components.config import runtime, store_ref
from components.core import claims, deletions
from components.core.plan import Plan
from components.targets import target_for

PROJECT = os.path.dirname(os.path.abspath(__file__))

runtime.stop_quietly_when_interrupted()    # the engine's cancel: no KeyboardInterrupt traceback

raw, problems = runtime.read_raw()
# a serving stack on a platform stack's store (`store`): that stack's outputs, through a StackReference
raw, more = store_ref.resolve(raw, os.path.join(PROJECT, ".state"), runtime.stack_name())
problems += more
try:
    cfg = config.load(raw, runtime.stack_name(), PROJECT)
except config.ConfigError as exc:
    raise pulumi.RunError(str(config.ConfigError(problems + exc.problems))) from None
target = target_for(cfg)
# what `up` would fail on once started (ports, images, FUSE, TLS, SSH, GPUs, names, the cluster), before anything is made
problems += target.preflight()
if not problems:    # the model prefixes: one another stack owns in a shared bucket is refused here
    problems += claims.problems(cfg)
if problems:
    raise pulumi.RunError(str(config.ConfigError(problems)))
deletions.say(cfg)      # what this run deletes from the bucket (or keeps) as models leave or move, said first
stack = Plan("rustfs-vllm", target)
for name, value in stack.exports().items():
    pulumi.export(name, value)
