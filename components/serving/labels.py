"""The labels on every container of a stack: whose it is (``rustfs-vllm.stack``) and what it does."""
from __future__ import annotations

import pulumi_docker as docker


def labels(stack: str, role: str, **extra: str) -> list[docker.ContainerLabelArgs]:
    values = {"rustfs-vllm.stack": stack, "rustfs-vllm.role": role, **{f"rustfs-vllm.{k}": v for k, v in extra.items()}}
    return [docker.ContainerLabelArgs(label=k, value=v) for k, v in sorted(values.items())]
