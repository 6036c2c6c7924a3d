"""ReadinessWait: `up` returns only when a server answers, looking from this host.

A `command.local.Command` runs `scripts/wait-ready` (progress lines stream to `pulumi up`), which
fails with the container's last log lines when the container exits or the timeout passes. Its
`triggers` hold the container's id, so a replaced container is waited for again; an unchanged one
is not (nothing runs on a no-change `up`), unless preview found it not serving (restarting, OOM-killed,
exited: ``recheck``), so that `up` fails naming the cause while it does not serve.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_command as command

from components.paths import SCRIPTS

SCRIPT = os.path.join(SCRIPTS, "wait-ready")


@dataclass
class ReadinessWaitArgs:
    container_id: pulumi.Input[str]
    container_name: str
    url: str
    contains: str = ""
    any_status: bool = False
    timeout: int = 600
    auth: pulumi.Input[str] = ""
    docker_host: str = ""       # the container's Docker daemon when not this machine's (ssh://...)
    ssh_bin: str = ""           # folder whose `ssh` reaches that host (components.ssh.wrapper)
    recheck: str = ""           # a container that is not serving (components.docker.serving_state): waited for again
    recheck_id: str = ""        # that container's id (its replacement is waited for anyway: no extra trigger)


class ReadinessWait(pulumi.ComponentResource):
    def __init__(self, name: str, args: ReadinessWaitArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:serving:ReadinessWait", name, None, opts)
        recheck = pulumi.Output.from_input(args.container_id).apply(
            lambda cid: args.recheck if args.recheck and cid == args.recheck_id else "")
        env = pulumi.Output.all(args.auth, recheck).apply(lambda v: {
            "RV_URL": args.url, "RV_CONTAINS": args.contains, "RV_ANY_STATUS": "1" if args.any_status else "0",
            "RV_TIMEOUT": str(args.timeout), "RV_CONTAINER": args.container_name,
            **({"RV_AUTH": v[0]} if v[0] else {}),
            # waited for again (not serving when the program looked): said when it serves again (wait-ready)
            **({"RV_RECHECK": v[1]} if v[1] else {}),
            **({"DOCKER_HOST": args.docker_host, "RV_SSH_BIN": args.ssh_bin} if args.docker_host else {})})
        self.command = command.local.Command(
            f"{name}-wait",
            create=SCRIPT,
            environment=env if isinstance(args.auth, str) and not args.auth else pulumi.Output.secret(env),
            triggers=pulumi.Output.all(args.container_id, recheck).apply(lambda v: [v[0], v[1]] if v[1] else [v[0]]),
            opts=pulumi.ResourceOptions(parent=self))
        self.register_outputs({})
