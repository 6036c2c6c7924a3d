"""VllmServer: one vLLM OpenAI-compatible server container per model, reading /models/<prefix>.

The argv is the guide's (``--model /models/<prefix> --served-model-name ... --dtype ...
--max-model-len ... [--gpu-memory-utilization ...]``) followed by the model's extra arguments; the
image's entrypoint (``vllm serve``) is kept, so any image that accepts vllm/vllm-openai-cpu's argv
works unchanged. The mount is bound read-only at /models. The container is replaced (deleted first:
fixed name and port) whenever its inputs change, including when the mount was re-created, so a
fresh mount always reaches it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import pulumi

from .resources import ContainerResource


@dataclass
class VllmServerArgs:
    stack: str
    container_name: str
    image: str
    model_dir: str                    # /models/<prefix>
    served_name: str
    dtype: str
    max_model_len: int
    port: int
    mount_path: str
    mount_id: pulumi.Input[str]
    bind_address: str = "0.0.0.0"
    gpu_memory_utilization: Optional[float] = None
    kv_cache_space_gib: Optional[float] = None
    extra_args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    api_key: pulumi.Input[str] = ""
    shm_size: str = "2g"
    gpus: str = ""
    restart: str = "unless-stopped"
    ready_timeout: int = 900


def vllm_argv(args: VllmServerArgs) -> list[str]:
    argv = ["--model", args.model_dir, "--served-model-name", args.served_name, "--dtype", args.dtype,
            "--max-model-len", str(args.max_model_len)]
    if args.gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", f"{args.gpu_memory_utilization:g}"]
    return argv + list(args.extra_args)


class VllmServer(pulumi.ComponentResource):
    base_url: pulumi.Output[str]
    served_name: pulumi.Output[str]
    container_id: pulumi.Output[str]

    def __init__(self, name: str, args: VllmServerArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:serving:VllmServer", name, None, opts)
        api_key = pulumi.Output.secret(args.api_key)
        env = {**dict(args.env),
               **({"VLLM_CPU_KVCACHE_SPACE": f"{args.kv_cache_space_gib:g}"} if args.kv_cache_space_gib else {})}
        self.container = ContainerResource(f"{name}-container", {
            "name": args.container_name,
            "image": args.image,
            "command": vllm_argv(args),
            "env": env,
            # the API key reaches vLLM from a file mounted into the container, not its config
            "secret_env": pulumi.Output.secret(api_key.apply(lambda k: {"VLLM_API_KEY": k} if k else {})),
            "secrets": pulumi.Output.secret(api_key.apply(lambda k: [k] if k else [])),
            "labels": {"rustfs-vllm.stack": args.stack, "rustfs-vllm.role": "vllm",
                       "rustfs-vllm.model": args.served_name},
            "ports": [{"internal": 8000, "external": args.port, "ip": args.bind_address}],
            "mounts": [{"type": "bind", "source": args.mount_path, "target": "/models", "read_only": True}],
            "shm_size": args.shm_size,
            "gpus": args.gpus,
            "restart": args.restart,
            "mount_id": args.mount_id,
            "ready_url": f"http://127.0.0.1:{args.port}/v1/models",
            "ready_contains": f'"{args.served_name}"',
            "ready_headers": pulumi.Output.secret(api_key.apply(lambda k: {"Authorization": f"Bearer {k}"} if k else {})),
            "ready_timeout": args.ready_timeout,
        }, pulumi.ResourceOptions(parent=self))
        host = "127.0.0.1" if args.bind_address in ("0.0.0.0", "127.0.0.1") else args.bind_address
        self.base_url = pulumi.Output.from_input(f"http://{host}:{args.port}/v1")
        self.served_name = pulumi.Output.from_input(args.served_name)
        self.container_id = self.container.container_id
        self.register_outputs({"base_url": self.base_url, "served_name": self.served_name,
                               "container_id": self.container_id})
