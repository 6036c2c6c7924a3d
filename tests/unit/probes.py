"""Given answers for preflight's probes (components.docker.preflight.Probes), so its decisions can be
tested on any machine; the real probes run in tests/reliability/test_bad_inputs.py and against the
simulated hosts."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

import pytest

from components import config
from components.docker import preflight
from components.hosts.docker_facts import DockerFacts


@dataclass
class GivenProbes:
    in_use: tuple[int, ...] = ()
    memory: int = 24 * 2**30
    images: Callable[[str], Optional[bool]] = lambda image: None
    modules: Callable[[str, str], Optional[bool]] = lambda image, module: None
    fuse: bool = True
    volume: Callable[[str], Optional[str]] = lambda name: None
    tls: Callable[[str, str], Optional[str]] = lambda endpoint, ca: None
    ssh: Callable[[], list[str]] = list
    facts: Mapping[str, Optional[DockerFacts]] = field(default_factory=dict)

    def port_in_use(self, address: str, port: int) -> bool:
        return port in self.in_use

    def memory_bytes(self) -> int:
        return self.memory

    def image_present(self, image: str) -> Optional[bool]:
        return self.images(image)

    def image_has_module(self, image: str, module: str) -> Optional[bool]:
        return self.modules(image, module)

    def fuse_available(self) -> bool:
        return self.fuse

    def volume_format(self, name: str) -> Optional[str]:
        return self.volume(name)

    def tls_problem(self, endpoint: str, ca_bundle: str) -> Optional[str]:
        return self.tls(endpoint, ca_bundle)

    def ssh_problems(self) -> list[str]:
        return self.ssh()

    def docker_facts(self, host: str) -> Optional[DockerFacts]:
        return self.facts.get(host)


def load_and_check(raw, stack: str, project_dir: str, **given) -> config.StackConfig:
    """config.load, then preflight with the given answers: every problem raised as a ConfigError."""
    cfg = config.load(raw, stack, project_dir)
    problems = preflight.check(cfg, GivenProbes(**given))
    if problems:
        raise config.ConfigError(problems)
    return cfg


__all__ = ["GivenProbes", "load_and_check", "pytest"]
