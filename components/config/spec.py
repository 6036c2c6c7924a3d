"""The validated configuration: what the rest of the program reads (never raw config values)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

DEFAULT_CREDENTIAL = "rustfsadmin"  # RustFS's built-in access and secret key: dev stacks only
LOCAL = "local"
# where a remote host keeps this program's scripts, logs and CA bundle (one folder per stack)
REMOTE_TOOLS_ROOT = "/var/lib/rustfs-vllm"


class ConfigError(ValueError):
    """Raised with every problem found in the stack's configuration."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid stack configuration:\n  - " + "\n  - ".join(problems))


@dataclass(frozen=True)
class HostSpec:
    name: str
    local: bool                   # this machine: local commands and the local Docker socket
    docker_host: str              # "" (the local socket) or ssh://user@host:port
    ssh_host: str = ""
    ssh_port: int = 22
    ssh_user: str = "root"
    host_key: str = ""
    address: str = "127.0.0.1"    # where this machine reaches the host's published ports
    bind_address: str = "0.0.0.0"
    gpus: Optional[str] = None    # None: vllmGpus
    mount_path: str = ""
    mount_cache_dir: str = ""
    s3_endpoint: str = ""
    vllm_image: str = ""
    rclone_image: str = ""        # the image of its mounts' keepers (rcloneImage)
    tools_dir: str = ""           # remote hosts: this stack's scripts and logs there
    implicit: bool = False        # the implicit local host of a stack without `hosts`

    @property
    def prefix(self) -> str:
        """Resource name prefix: none for the implicit host (its URNs are the ones stacks had)."""
        return "" if self.implicit else f"{self.name}-"


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
    load_format: str = "mount"                               # "mount", "runai_streamer" or "local_copy"
    replicas: int = 1                                        # target kubernetes: the Deployment's replicas
    load_format_given: bool = True                           # False: the target's default (the note on upgrade)
    memory_gib: Optional[float] = None                       # target kubernetes: the pod's memory request
    cpus: Optional[float] = None                             # target kubernetes: the pod's CPU request
    change_order: Optional[str] = None                       # changeOrder (None: vllmChangeOrder)
    change_port: int = 0                                     # changePort: its other server's port (side by side)

    @property
    def mounted(self) -> bool:
        """Read through the host's rclone mount (not a copy on its disk, not streamed)."""
        return self.load_format == "mount"


@dataclass(frozen=True)
class KubeSpec:
    """target kubernetes: the cluster and how this stack uses it."""
    kubeconfig: str               # the kubeconfig's text (a secret)
    namespace: str
    node_address: str             # where this machine reaches NodePorts
    s3_node_port: int             # RustFS's S3 Service NodePort (s3Server rustfs)
    storage_class: str            # "" = the cluster's default StorageClass
    storage_size: str             # RustFS's volume claim
    rclone_image: str
    router_node_port: int = 30880  # the stack's one endpoint's NodePort (kubeRouterNodePort)
    store_node_label: str = ""     # kubeStoreNodeLabel "key=value": RustFS there, the serving pods elsewhere


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
    router: bool = True                       # router: the stack's one OpenAI endpoint
    router_port: int = 8080                   # routerPort: the endpoint (+1: the router, +2: its metrics)
    router_policy: str = "cache_aware"        # routerPolicy: vllm-router's --policy
    router_image: str = "rustfs-vllm/vllm-router:0.1.17"   # routerImage: vllm-router and nginx
    kube: Optional["KubeSpec"] = None          # target kubernetes: the cluster (None: Docker hosts)
    vllm_compile_cache: bool = False          # vllmCompileCache: a compile-cache volume per model, image, revision
    copy_flags: tuple[str, ...] = ()          # copyFlags: rclone copy flags of local_copy models ([] = defaults)
    read_keys: str = "shared"                 # readKeys: scoped (a read-only key per stack) or shared (root keys)
    read_keys_given: bool = True              # False: readKeys from its default (the note on upgrade)
    rclone_image: str = "rustfs-vllm/rclone-mount:1.75.2"   # rcloneImage: the mounts' keepers (Docker hosts)
    mount_command: str = "mount2"             # mountCommand: rclone mount2 (go-fuse) or mount
    mount_read_ahead_kb: int = 16384          # mountReadAheadKb: each mount's bdi read-ahead (0: the kernel's)
    vllm_drain_seconds: int = 60              # vllmDrainSeconds: vLLM's --shutdown-timeout (Docker hosts)
    vllm_change_order: str = "auto"           # vllmChangeOrder: side by side, stop-first, or judged (Docker hosts)
    role: str = "serving"                     # role: serving, or store (a platform stack: server and bucket only)
    store: str = ""                           # store: the platform stack this one uses by reference ("" = none)
    take_over_prefixes: bool = False          # takeOverPrefixes: a prefix whose owner is no longer registered
    prune_objects: bool = False               # pruneObjects: an up may delete objects not in a model's folder
    tenants: dict[str, tuple[str, ...]] = field(default_factory=dict)   # tenants (role store): stack -> prefixes
    store_read_keys: tuple[str, str] = ("", "")   # storeKey's read pair (with store): what serving hosts read with

    def model(self, name: str) -> ModelSpec:
        return next(m for m in self.models if m.name == name)

    def change_order(self, m: ModelSpec) -> str:
        """The model's changeOrder, else the stack's vllmChangeOrder."""
        return m.change_order or self.vllm_change_order

    def models_on(self, host: str) -> list[ModelSpec]:
        return [m for m in self.models if host in m.hosts]
