"""rustfs-vllm: RustFS bucket -> rclone FUSE mount -> vLLM, as one Pulumi program.

Thin on purpose: read and validate the configuration (failing before anything is registered),
build the ServingStack component, export its outputs.
"""
import os

import pulumi

from components import config, machine, settings, tls
from components.stack import ServingStack, ServingStackArgs

raw, problems = settings.read_raw()
try:
    cfg = config.load(raw, settings.stack_name(), os.path.dirname(os.path.abspath(__file__)),
                      port_in_use=machine.port_checker(settings.stack_name()), memory_bytes=machine.memory_bytes,
                      image_present=machine.image_present, fuse_available=machine.fuse_available,
                      volume_format=machine.volume_format, tls_probe=tls.probe)
    if problems:
        raise config.ConfigError(problems)
except config.ConfigError as exc:
    if problems and exc.problems is not problems:
        exc = config.ConfigError(problems + exc.problems)
    raise pulumi.RunError(str(exc)) from None

stack = ServingStack("rustfs-vllm", ServingStackArgs(config=cfg))

pulumi.export("s3_server", stack.server.kind)
pulumi.export("s3_endpoint", stack.server.endpoint)
pulumi.export("bucket", stack.bucket.name)
pulumi.export("bucket_adopted", stack.bucket.adopted)
pulumi.export("mount_path", stack.mount_root.path)
pulumi.export("models", {name: {"base_url": s.base_url, "served_name": s.served_name,
                                "prefix": f"s3://{cfg.bucket}/{stack.uploads[name].prefix_value}/"}
                         for name, s in stack.servers.items()})
first = cfg.models[0]
pulumi.export("curl", stack.servers[first.name].base_url.apply(
    lambda url: f"curl -s {url}/completions -H 'Content-Type: application/json'"
                + (" -H \"Authorization: Bearer $VLLM_API_KEY\"" if cfg.vllm_api_key else "")
                + f" -d '{{\"model\": \"{first.name}\", \"prompt\": \"{cfg.smoke_prompt}\", \"max_tokens\": "
                  f"{cfg.smoke_max_tokens}, \"temperature\": 0}}'"))
if stack.smoke:
    pulumi.export("smoke_completions", {name: t.text for name, t in stack.smoke.items()})
