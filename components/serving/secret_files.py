"""Credentials into containers as files, never as configuration.

`docker inspect` shows a container's environment and argv to anyone who can reach the daemon, so
no credential goes there. Each secret becomes a `docker.Container` upload: a file written into the
created container before it starts (mode 0444, owned by root, so any image user can read it,
including a user given by NAME such as RustFS's `rustfs`). The upload's content is a Pulumi secret,
so the state holds it encrypted.

Servers that read `<NAME>_FILE` variables natively (RustFS) get the file's path in their
environment. Others get a small `/bin/sh` entrypoint that exports every file of the folder as a
variable and then runs the image's own entrypoint and command; that needs `/bin/sh` in the image
and the program to know the image's entrypoint.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import pulumi
import pulumi_docker as docker

SECRETS_DIR = "/run/rustfs-vllm/secrets"
WRAPPER = ('for f in ' + SECRETS_DIR + '/*; do [ -f "$f" ] && export "$(basename "$f")=$(cat "$f")"; done; '
           'exec "$@"')


def uploads(secret_env: pulumi.Input[Mapping[str, str]]) -> pulumi.Output[list]:
    """One secret upload per variable (an empty value is left out)."""
    def files(env: Mapping[str, str]) -> list[docker.ContainerUploadArgs]:
        return [docker.ContainerUploadArgs(file=f"{SECRETS_DIR}/{name}", content=value, permissions="0444")
                for name, value in sorted(env.items()) if value]
    return pulumi.Output.secret(pulumi.Output.from_input(secret_env).apply(files))


def wrapped_entrypoint(image_entrypoint: Sequence[str]) -> list[str]:
    """An entrypoint that exports the secret files, then execs ``image_entrypoint`` + the command."""
    return ["/bin/sh", "-c", WRAPPER, "rustfs-vllm-secrets", *image_entrypoint]
