"""The serving hosts as one type: this machine (``LocalHost``) or one reached over SSH
(``SshHost``). Both offer what the stack needs of a host, so the graph never asks which it is:

- ``command``: run one action of the mount tool as a pulumi-command resource (a ``local.Command``
  here; a ``remote.Command`` there, its environment on stdin, running the copy HostTools put there);
- ``docker``: the options that put a resource on the host's Docker (the local socket, or a
  pulumi-docker provider over ``ssh://``);
- ``setup``: what must exist on the host before its mounts (HostTools on a remote host);
- paths (logs, in root's /var/log/rustfs-vllm; mount markers, the CA bundle, rclone) and the readiness wait's view of the host;
- ``docker_facts``: what preflight asks of its Docker daemon.
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Callable, Mapping, Optional

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from components.hosts import docker_facts, machine, remote_mounts, ssh
from components.mounting import keeper_tool
from components.mounting.tool_base import env_stdin  # noqa: F401 - the hosts' name for it
from components.config.spec import REMOTE_TOOLS_ROOT, HostSpec, StackConfig
from components.paths import SCRIPTS

SCRIPT = os.path.join(SCRIPTS, "rclone-mount")
# SSH connection attempts of a remote command before it fails (pulumi-command's default is 10, with
# growing waits between them: minutes for a host that is down).
DIAL_ATTEMPTS = 3


class Host(ABC):
    """One serving host of a stack."""

    def __init__(self, spec: HostSpec, cfg: StackConfig) -> None:
        self.spec, self.cfg = spec, cfg
        self.after: list[pulumi.Resource] = []     # what its mounts wait for besides the bucket (setup)
        self.ca_path = ""                          # where the host has rustfsCaBundle ("" = as given)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def prefix(self) -> str:
        return self.spec.prefix

    def setup(self, owner: pulumi.Resource) -> None:
        """Declare what the host needs before its mounts (nothing on this machine)."""

    @abstractmethod
    def command(self, owner: pulumi.Resource, name: str, up: str, down: str,
                environment: pulumi.Input[Mapping[str, str]], triggers: list,
                opts: Optional[pulumi.ResourceOptions], delete_first: bool = True) -> pulumi.CustomResource:
        """``rclone-mount <up>`` on create, ``<down>`` on delete (first, when replaced: the same path
        is reused; ``delete_first=False``: after the replacement is made, for what must not stop
        serving while it is made), as a child of ``owner`` with the component's own dependencies."""

    @abstractmethod
    def docker(self, owner: pulumi.Resource) -> pulumi.ResourceOptions:
        """Options that put a child of ``owner`` on this host's Docker."""

    def log_file(self, prefix: str) -> str:
        """rclone's log of ``prefix`` (a mount's, a copy's) on the host: in root's own folder
        (/var/log/rustfs-vllm/<namePrefix>), never in a checkout (the keeper writes it as root)."""
        return f"{keeper_tool.LOGS_HOME}/{self.cfg.name_prefix}/rclone-{self.cfg.stack}-{prefix}.log"

    @abstractmethod
    def marker_file(self, prefix: str) -> str:
        """Where the mount tool records a mount's generation ("" where the program cannot look)."""

    def mount_marker(self, prefix: str) -> str:
        """Where the mount tool records the generation of ``prefix``'s mount, on the host."""
        return self.marker_file(prefix)

    def mount_seen(self, prefix: str, mount_path: str) -> Optional[dict]:
        """What the host says of that mount ({"generation", "state"}); None: the program looks itself."""
        return None

    def look_at_mounts(self) -> None:
        """Ask the host about its mounts (once, after preflight reached it): nothing to ask here."""

    def keeper_down(self, name: str) -> str:
        """Why the mount keeper ``name`` is down, in one line ("": running, gone, or not known here)."""
        return ""

    def ssh_argv(self) -> list[str]:
        """``ssh ... host`` for a command on the host from this machine ([]: this machine)."""
        return []

    def keeper_spec(self, prefix: str) -> str:
        """Where a mount's keeper reads its spec on the host (mode 0600: it holds the keys): root's,
        outside any checkout (what the spec says, root runs at every keeper start)."""
        return f"{REMOTE_TOOLS_ROOT}/{self.cfg.name_prefix}/mounts/{self.cfg.stack}-{prefix}.keeper.json"

    def keeper_spec_before(self, prefix: str) -> str:
        """Where an older version of the program kept that spec ("" = where it is now): removed."""
        return ""

    @property
    @abstractmethod
    def rclone(self) -> str: ...

    @abstractmethod
    def mount_alive(self) -> Optional[Callable[[str], bool]]: ...

    @abstractmethod
    def readiness(self) -> dict[str, str]:
        """VllmServerArgs fields that say how this machine reaches the host's servers."""

    @abstractmethod
    def docker_facts(self) -> Optional[docker_facts.DockerFacts]:
        """The host's Docker daemon as preflight needs it (None when it does not answer)."""


def _child(owner: pulumi.Resource, opts: Optional[pulumi.ResourceOptions], delete_first: bool = True) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions(parent=owner, delete_before_replace=delete_first,
                                  depends_on=opts.depends_on if opts else None)


class LocalHost(Host):
    """This machine: local commands, the local Docker socket, files the program can read."""

    def command(self, owner, name, up, down, environment, triggers, opts, delete_first=True):  # type: ignore[no-untyped-def]
        return command.local.Command(f"{name}-command", create=f"{SCRIPT} {up}", delete=f"{SCRIPT} {down}",
                                     environment=environment, triggers=triggers,
                                     opts=_child(owner, opts, delete_first))

    def docker(self, owner: pulumi.Resource) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=owner)

    def marker_file(self, prefix: str) -> str:
        return os.path.join(self.cfg.state_dir, "mounts", self.cfg.stack, f"{prefix}.json")

    def keeper_spec_before(self, prefix: str) -> str:
        return os.path.join(self.cfg.state_dir, "mounts", self.cfg.stack, f"{prefix}.keeper.json")

    @property
    def rclone(self) -> str:
        return self.cfg.rclone_binary

    def mount_alive(self) -> Optional[Callable[[str], bool]]:
        return machine.mount_alive

    def keeper_down(self, name: str) -> str:
        return keeper_tool.keeper_down(name) if name else ""

    def readiness(self) -> dict[str, str]:
        return {"address": "" if self.spec.implicit else self.spec.address, "docker_host": "", "ssh_bin": ""}

    def docker_facts(self) -> Optional[docker_facts.DockerFacts]:
        return docker_facts.local_facts()


class SshHost(Host):
    """A host reached over SSH: ``remote.Command``s, pulumi-docker over ``ssh://``, this stack's
    tools in ``tools_dir`` there (HostTools)."""

    def __init__(self, spec: HostSpec, cfg: StackConfig, files: ssh.SshFiles) -> None:
        super().__init__(spec, cfg)
        self.files = files
        self.connection = command.remote.ConnectionArgs(
            host=spec.ssh_host, port=spec.ssh_port, user=spec.ssh_user,
            private_key=pulumi.Output.secret(cfg.ssh_private_key) if cfg.ssh_private_key else None,
            host_key=spec.host_key or None, dial_error_limit=DIAL_ATTEMPTS, per_dial_timeout=10)
        self._provider: Optional[docker.Provider] = None
        self._mounts_seen: Optional[dict] = None

    def setup(self, owner: pulumi.Resource) -> None:
        from components.hosts.host_tools import HostTools, HostToolsArgs

        tools = HostTools(f"{self.prefix}host-tools", HostToolsArgs(
            host=self.name, connection=self.connection, tools_dir=self.spec.tools_dir, ca_bundle=self.cfg.ca_bundle),
            pulumi.ResourceOptions(parent=owner))
        self.after, self.ca_path = [tools], tools.ca_path

    def command(self, owner, name, up, down, environment, triggers, opts, delete_first=True):  # type: ignore[no-untyped-def]
        script = f"{self.spec.tools_dir}/rclone-mount"
        return command.remote.Command(
            f"{name}-command", connection=self.connection, create=f"{script} {up} --env-stdin",
            delete=f"{script} {down} --env-stdin", stdin=pulumi.Output.from_input(environment).apply(env_stdin),
            add_previous_output_in_env=False, triggers=triggers, opts=_child(owner, opts, delete_first))

    def docker(self, owner: pulumi.Resource) -> pulumi.ResourceOptions:
        if self._provider is None:
            self._provider = docker.Provider(f"{self.prefix}docker", host=self.spec.docker_host,
                                             ssh_opts=ssh.options(self.spec, self.files),
                                             opts=pulumi.ResourceOptions(parent=owner))
        return pulumi.ResourceOptions(parent=owner, provider=self._provider)

    def marker_file(self, prefix: str) -> str:
        return ""

    def mount_marker(self, prefix: str) -> str:
        return f"{self.spec.tools_dir}/mounts/{self.cfg.stack}-{prefix}.json"

    def mount_seen(self, prefix: str, mount_path: str) -> Optional[dict]:
        """What the host said of that mount (look_at_mounts); {} when it was not asked (generation 0)."""
        return (self._mounts_seen or {}).get("mounts", {}).get(prefix, {})

    def look_at_mounts(self) -> None:
        """Asked over SSH once per run, for every mount of the stack on the host (a keeper stopped or
        removed there shows as a mount not alive); when the host does not answer, the generation it
        last reported (kept on this machine), with a warning."""
        mounts = {m.prefix: {"marker": self.mount_marker(m.prefix), "mount": f"{self.spec.mount_path}/{m.prefix}"}
                  for m in self.cfg.models_on(self.name) if m.mounted}
        self._mounts_seen = remote_mounts.look(self.ssh_argv(), self.spec.tools_dir, mounts,
                                               self._seen_file(), env_stdin)
        if self._mounts_seen.get("unreachable"):
            pulumi.log.warn(f"host {self.name} did not answer over SSH: its mounts are not checked in this run "
                            "(what they last reported is assumed)")
        elif self._mounts_seen.get("failed"):
            pulumi.log.warn(f"host {self.name}: the check of its mounts failed ({self._mounts_seen['failed']}); they "
                            "count as unknown in this run: none is mounted again, and none is taken as fine (what "
                            f"they last reported is assumed). Look at {self.spec.tools_dir}/rclone-mount mount-states "
                            "on the host")

    def ssh_argv(self) -> list[str]:
        return ssh.ssh_argv(self.spec, self.files)

    def _seen_file(self) -> str:
        return os.path.join(self.cfg.state_dir, "mounts", self.cfg.stack, f"host-{self.name}.seen.json")

    @property
    def rclone(self) -> str:
        return "rclone"

    def mount_alive(self) -> Optional[Callable[[str], bool]]:
        return None

    def readiness(self) -> dict[str, str]:
        return {"address": self.spec.address, "docker_host": self.spec.docker_host,
                "ssh_bin": ssh.wrapper(self.spec, self.files)}

    def docker_facts(self) -> Optional[docker_facts.DockerFacts]:
        return docker_facts.remote_facts(ssh.ssh_argv(self.spec, self.files))


def hosts_of(cfg: StackConfig) -> list[Host]:
    """The stack's hosts as Host objects; the SSH files (key, pinned host keys) are written once here."""
    remote = [h for h in cfg.hosts if not h.local]
    files = ssh.files(cfg.state_dir, cfg.stack, cfg.ssh_private_key, cfg.hosts) if remote else None
    return [LocalHost(h, cfg) if h.local else SshHost(h, cfg, files) for h in cfg.hosts]  # type: ignore[arg-type]
