"""The places a stack runs on, one module each, registered here (the interface: components.core.target).

A new target is a module beside these with a Target subclass, and one more entry in TARGETS."""
from __future__ import annotations

from components.config.spec import StackConfig
from components.core.target import Target
from components.targets.docker import DockerTarget
from components.targets.kubernetes import KubeTarget

TARGETS: list[type[Target]] = [DockerTarget, KubeTarget]


def target_for(cfg: StackConfig) -> Target:
    """The one target that runs ``cfg``."""
    [cls] = [t for t in TARGETS if t.accepts(cfg)]
    return cls(cfg)
