"""rustfs-vllm: RustFS bucket -> rclone FUSE mount -> vLLM, as one Pulumi program.

Thin on purpose: read and validate the configuration (failing before anything is registered),
build the ServingStack component, export its outputs.
"""
import os

import pulumi

from components import config, machine, preflight, settings, ssh, tls
from components.stack import ServingStack, ServingStackArgs

raw, problems = settings.read_raw()
PROJECT = os.path.dirname(os.path.abspath(__file__))


def host_probe(hosts: tuple, key: str) -> list[str]:
    return ssh.probe_all(hosts, ssh.files(os.path.join(PROJECT, ".state"), settings.stack_name(), key, hosts))


try:
    cfg = config.load(raw, settings.stack_name(), PROJECT,
                      port_in_use=machine.port_checker(settings.stack_name()), memory_bytes=machine.memory_bytes,
                      image_present=machine.image_present, fuse_available=machine.fuse_available,
                      volume_format=machine.volume_format, tls_probe=tls.probe, host_probe=host_probe)
    if problems:
        raise config.ConfigError(problems)
except config.ConfigError as exc:
    if problems and exc.problems is not problems:
        exc = config.ConfigError(problems + exc.problems)
    raise pulumi.RunError(str(exc)) from None


def remote_docker(h) -> "preflight.DockerFacts | None":
    files = ssh.files(os.path.join(PROJECT, ".state"), settings.stack_name(), cfg.ssh_private_key, cfg.hosts)
    return preflight.remote_facts(ssh.ssh_argv(h, files))


# what `up` would fail on after uploading and mounting (GPUs, container names), before anything is made
found = preflight.check(cfg, remote=remote_docker)
if found:
    raise pulumi.RunError(str(config.ConfigError(found)))

stack = ServingStack("rustfs-vllm", ServingStackArgs(config=cfg))

pulumi.export("s3_server", stack.server.kind)
pulumi.export("s3_endpoint", stack.server.endpoint)
pulumi.export("bucket", stack.bucket.name)
pulumi.export("bucket_adopted", stack.bucket.adopted)
pulumi.export("mount_path", stack.mount_root.path)


def curl(base_url: pulumi.Output[str], model: str) -> pulumi.Output[str]:
    """The request an OpenAI client sends by default (no temperature: sampled), as a curl line."""
    return base_url.apply(
        lambda url: f"curl -s {url}/completions -H 'Content-Type: application/json'"
                    + (" -H \"Authorization: Bearer $VLLM_API_KEY\"" if cfg.vllm_api_key else "")
                    + f" -d '{{\"model\": \"{model}\", \"prompt\": \"{cfg.smoke_prompt}\", \"max_tokens\": "
                      f"{cfg.smoke_max_tokens}}}'")


def metrics(base_url: pulumi.Output[str]) -> pulumi.Output[str]:
    """vLLM's Prometheus endpoint beside its OpenAI API."""
    return base_url.apply(lambda url: url.removesuffix("/v1") + "/metrics")


first = cfg.models[0]
if cfg.hosts[0].implicit:   # one local host: the outputs stacks had before `hosts`
    servers = stack.servers[cfg.hosts[0].name]
    pulumi.export("models", {name: {"base_url": s.base_url, "served_name": s.served_name,
                                    "metrics_url": metrics(s.base_url),
                                    "prefix": f"s3://{cfg.bucket}/{stack.uploads[name].prefix_value}/"}
                             for name, s in servers.items()})
    pulumi.export("curl", curl(servers[first.name].base_url, first.name))
    if cfg.smoke_test:
        pulumi.export("smoke_completions", {name: t.text for name, t in stack.smoke[cfg.hosts[0].name].items()})
else:
    # per model: every host's base URL and curl line (a client, or a load balancer, spreads over them)
    pulumi.export("models", {m.name: {
        "served_name": m.name, "prefix": f"s3://{cfg.bucket}/{stack.uploads[m.name].prefix_value}/",
        "hosts": list(m.hosts), "base_urls": [stack.servers[h][m.name].base_url for h in m.hosts],
        "metrics_urls": [metrics(stack.servers[h][m.name].base_url) for h in m.hosts],
        "curls": {h: curl(stack.servers[h][m.name].base_url, m.name) for h in m.hosts},
        **({"entry_url": stack.balancer.urls[m.name]} if m.balancer_port and stack.balancer else {})}
        for m in cfg.models})
    pulumi.export("hosts", {h.name: {"docker": h.docker_host or "local", "address": h.address,
                                     "mount_path": h.mount_path, "models": [m.name for m in cfg.models if h.name in m.hosts]}
                            for h in cfg.hosts})
    pulumi.export("curl", curl(stack.servers[first.hosts[0]][first.name].base_url, first.name))
    if cfg.smoke_test:
        pulumi.export("smoke_completions", {m.name: {h: stack.smoke[h][m.name].text for h in m.hosts}
                                            for m in cfg.models})
