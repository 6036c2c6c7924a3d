"""VllmServer: one vLLM OpenAI-compatible server container per model, reading /models/<prefix>.

The argv is the guide's (``--model /models/<prefix> --served-model-name ... --dtype ...
--max-model-len ... [--gpu-memory-utilization ...]``) followed by the model's extra arguments; the
image's entrypoint is kept, so any image that accepts vllm/vllm-openai-cpu's argv works unchanged.
The mount root is bound read-only at /models with ``rslave`` propagation: the model's own mount
(``<mountPath>/<prefix>``) appears as ``/models/<prefix>``, and a re-made mount reaches the running
container.

Declared with pulumi-docker's ``Container`` (replaced delete-first: fixed name and port; a stop lets vLLM
finish what it serves first: ``--shutdown-timeout`` from vllmDrainSeconds, the container's stop timeout
and a destroy's grace 30 s beyond it), then a
readiness wait from this host until ``/v1/models`` lists the model. The model's revision is a label:
new weights replace the container (vLLM loads them at start); nothing about the mount does. An API key
reaches vLLM as a secret file: a ``--config`` YAML file uploaded into the container (vLLM reads
its options from it), never argv or environment, so ``docker inspect`` shows no key.

A mounted model's container waits for its mount before vLLM starts: its entrypoint is a
``/bin/sh`` wrapper that polls ``/models/<prefix>/config.json`` (a host restart may start the
container before the mount's keeper has mounted again), then runs ``vllm serve`` with the same argv
(the vllm/vllm-openai images' entrypoint); after ``MOUNT_WAIT_SECONDS`` it exits and the restart
policy starts it again. It never starts on an empty folder. Once the weights are there it starts the
warm-up (components/mounting/warm.py, run with ``python3 -c`` in the background: the model's files read
through the mount, several parts at once, so that rclone fetches them into its VFS cache while vLLM
boots; best effort, one line in the container's log), then ``vllm serve``.

A model with ``loadFormat: local_copy`` reads the host's own copy of its revision instead
(components.docker.copies), bound read-only at ``/models/<prefix>``: the same argv, local disk.

A model with ``loadFormat: runai_streamer`` is given its prefix in the bucket instead of the mount
(``--model s3://<bucket>/<prefix>/ --load-format runai_streamer``), its keys as a secret file, and the
host's network: components.serving.streamer.
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence

import pulumi
import pulumi_docker as docker

from components.serving import secret_files, streamer
from components.serving.readiness import ReadinessWait, ReadinessWaitArgs
from components.serving.labels import labels

API_KEY_CONFIG = f"{secret_files.SECRETS_DIR}/vllm-api-key.yaml"
# vllmCompileCache: where the volume is mounted, and the variables that put vLLM's torch.compile
# cache (VLLM_CACHE_ROOT/torch_compile_cache) and torch inductor's (kernels, FX graphs, the
# sampler's kernel compiled on the first sampled request) on it.
COMPILE_CACHE = "/vllm-cache"
COMPILE_CACHE_ENV = {"VLLM_CACHE_ROOT": f"{COMPILE_CACHE}/vllm", "TORCHINDUCTOR_CACHE_DIR": f"{COMPILE_CACHE}/inductor"}


@dataclass
class VllmServerArgs:
    stack: str
    container_name: str
    image_id: pulumi.Input[str]
    model_dir: str                    # /models/<prefix>
    served_name: str
    dtype: str
    max_model_len: int
    port: int
    mount_path: str                   # the mount root, bound at /models
    revision: pulumi.Input[str]
    bind_address: str = "0.0.0.0"
    gpu_memory_utilization: Optional[float] = None
    kv_cache_space_gib: Optional[float] = None
    extra_args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    api_key: pulumi.Input[str] = ""
    has_api_key: bool = False
    shm_size: str = "2g"
    gpus: str = ""
    restart: str = "unless-stopped"
    ready_timeout: int = 900
    drain_seconds: int = 0            # vllmDrainSeconds: vLLM's --shutdown-timeout (0: not given, vLLM's abort)
    address: str = ""                 # where this machine reaches the published port ("" = from bind_address)
    docker_host: str = ""             # a remote host's Docker (ssh://...), for the readiness wait's CLI
    ssh_bin: str = ""
    load_format: str = "mount"        # or "runai_streamer": model_dir is then s3://<bucket>/<prefix>/
    s3_endpoint: str = ""             # the streamer's: the host's view of the S3 endpoint
    access_key: pulumi.Input[str] = ""
    secret_key: pulumi.Input[str] = ""
    ca_bundle: str = ""
    compile_cache: bool = False                       # vllmCompileCache: a volume for vLLM's and inductor's caches
    weights_dir: Optional[pulumi.Input[str]] = None   # loadFormat local_copy: the host's copy, bound at model_dir
    copy_generation: int = 0                          # a new copy (the old one was lost) needs a new container
    memory_gib: Optional[float] = None                # models[].memoryGib: the container's memory limit (None: none)
    recheck: str = ""                                 # the readiness wait's extra trigger: not serving (serving_state)
    recheck_id: str = ""                              # ... of that container (a new one is waited for anyway)
    trouble: str = ""                                 # why it is waited for again, for the state output
    delete_before_replace: bool = True                # False: a side-by-side change (components.docker.change_order)

    @property
    def streamed(self) -> bool:
        return self.load_format == streamer.LOAD_FORMAT


VLLM_ENTRYPOINT = ["vllm", "serve"]      # vllm/vllm-openai(-cpu)'s ENTRYPOINT, run by the mount wait
MOUNT_WAIT_SECONDS = 600
MOUNT_WAIT = (
    # a stop while it waits (sh as PID 1 ignores SIGTERM by default) ends it at once, not after the stop timeout
    'trap "exit 143" TERM; '
    'n=0; until [ -f "$RV_MODEL_DIR/config.json" ]; do '
    '[ "$n" = 0 ] && echo "rustfs-vllm: waiting for the model\'s mount at $RV_MODEL_DIR" >&2; '
    f'n=$((n+1)); if [ "$n" -ge {MOUNT_WAIT_SECONDS} ]; then '
    f'echo "rustfs-vllm: $RV_MODEL_DIR/config.json is not there after {MOUNT_WAIT_SECONDS} s (is the mount\'s keeper '
    'running?); exiting so that the restart policy tries again" >&2; exit 75; fi; sleep 1; done; '
    # the warm-up (components/mounting/warm.py, $1) in the background, then vLLM: rclone fetches the weights
    # into its VFS cache while vLLM boots. Best effort: no python3 in the image, no warm-up
    'w="$1"; shift; if [ -n "$w" ] && command -v python3 >/dev/null 2>&1; then '
    'python3 -c "$w" "$RV_MODEL_DIR" </dev/null & fi; exec "$@"')


def _warm_code() -> str:
    """warm.py's text less its docstring: the entrypoint's first argument (python3 -c in the container)."""
    text = (Path(__file__).resolve().parent.parent / "mounting" / "warm.py").read_text(encoding="utf-8")
    first = ast.parse(text).body[0]
    return "\n".join(text.splitlines()[first.end_lineno:]).strip() + "\n"


WARM_CODE = _warm_code()


def mount_wait_entrypoint(warm: bool = True) -> list[str]:
    """The entrypoint of a mounted model's container: wait for the weights, start their warm-up, then
    ``vllm serve``."""
    return ["/bin/sh", "-c", MOUNT_WAIT, "rustfs-vllm-wait-mount", WARM_CODE if warm else "", *VLLM_ENTRYPOINT]


def vllm_argv(args: VllmServerArgs) -> list[str]:
    argv = ["--model", args.model_dir, "--served-model-name", args.served_name, "--dtype", args.dtype,
            "--max-model-len", str(args.max_model_len)]
    if args.gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", f"{args.gpu_memory_utilization:g}"]
    if args.has_api_key:
        argv += ["--config", API_KEY_CONFIG]
    if args.streamed:
        argv += streamer.argv(args.bind_address, args.port)
    if args.drain_seconds and given_drain(args.extra_args) is None:
        argv += [SHUTDOWN_FLAG, str(args.drain_seconds)]
    return argv + list(args.extra_args)


SHUTDOWN_FLAG = "--shutdown-timeout"
STOP_MARGIN_S = 30     # the container's stop timeout beyond vLLM's drain: its engine's own shutdown after it


def given_drain(extra_args: Sequence[str]) -> Optional[int]:
    """The ``--shutdown-timeout`` a model's extraArgs give (``--shutdown-timeout N`` or ``=N``), else None."""
    for i, arg in enumerate(extra_args):
        value = None
        if arg == SHUTDOWN_FLAG and i + 1 < len(extra_args):
            value = extra_args[i + 1]
        elif arg.startswith(SHUTDOWN_FLAG + "="):
            value = arg.split("=", 1)[1]
        if value is not None:
            try:
                return max(0, int(float(value)))
            except (ValueError, OverflowError):      # "soon", "inf", "nan": left to vLLM to refuse
                return None
    return None


def drain_of(args: "VllmServerArgs") -> int:
    """vLLM's drain: the model's own --shutdown-timeout (extraArgs), else the stack's vllmDrainSeconds."""
    drain = given_drain(args.extra_args)
    return args.drain_seconds if drain is None else drain


def stop_seconds(args: "VllmServerArgs") -> int:
    """How long the container is given to stop (docker stop -t, and a destroy's grace): vLLM's drain plus
    STOP_MARGIN_S; Docker's default 10 s when there is no drain."""
    drain = drain_of(args)
    return drain + STOP_MARGIN_S if drain else 10


def shm_megabytes(size: str) -> int:
    """``2g`` -> 2048: pulumi-docker's ``shm_size`` is in MB."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([kmgKMG]?)[bB]?", size)
    if not m:
        raise ValueError(f"not a size: {size!r}")
    number, unit = float(m.group(1)), m.group(2).lower()
    return max(1, int(number * {"": 1 / 2**20, "k": 1 / 1024, "m": 1, "g": 1024}[unit]))


def docker_gpus(gpus: str) -> Optional[str]:
    """The config's ``all`` / ``count=N`` / ``0,1`` in Docker's ``--gpus`` syntax."""
    if not gpus:
        return None
    if gpus == "all" or gpus.startswith("count="):
        return gpus
    return f'"device={gpus}"'


# vLLM on CPU pins its worker to cores of its own choosing ("auto": core 0 for every server), but servers
# without exclusive CPUs share the machine's: on the test cluster the new pod of a rolling step, pinned
# to the core where the old pod's worker was busy serving, got no CPU time for 6 minutes, and two models
# on one Docker host starved each other the same way. "nobind" leaves the placement to the kernel, on
# every target; a model's env (or vllmEnv) overrides it.
CPU_BIND = "VLLM_CPU_OMP_THREADS_BIND"


def cpu_binding(gpus: str) -> dict[str, str]:
    """The default CPU binding of a server with ``gpus`` ("" = CPU): nobind on CPU, vLLM's own on GPUs."""
    return {} if gpus else {CPU_BIND: "nobind"}


class VllmServer(pulumi.ComponentResource):
    base_url: pulumi.Output[str]
    served_name: pulumi.Output[str]
    container_id: pulumi.Output[str]

    def __init__(self, name: str, args: VllmServerArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:serving:VllmServer", name, None, opts)
        api_key = pulumi.Output.secret(args.api_key)
        cache = _compile_cache(name, args, self) if args.compile_cache else None
        env = server_env(args)
        uploads = _uploads(args, api_key)
        mounted = not args.streamed and args.weights_dir is None
        self.container = docker.Container(f"{name}-container", docker.ContainerArgs(
            name=args.container_name,
            image=args.image_id,
            entrypoints=mount_wait_entrypoint() if mounted else None,
            command=vllm_argv(args),
            envs=[f"{k}={v}" for k, v in sorted(env.items())],
            uploads=uploads,
            # a host-network container publishes nothing: its port is named in a label (preflight's own ports)
            labels=labels(args.stack, "vllm", model=args.served_name, revision=args.revision,
                          **({"ports": str(args.port)} if args.streamed else {}),
                          **({"copy": f"generation-{args.copy_generation}"} if args.weights_dir is not None else {})),
            # a streamed model reads the bucket, not the mount, on the host's network (components.serving.streamer)
            ports=None if args.streamed else [
                docker.ContainerPortArgs(internal=8000, external=args.port, ip=args.bind_address)],
            network_mode="host" if args.streamed else None,
            mounts=_mounts(args, cache),
            shm_size=shm_megabytes(args.shm_size),
            gpus=docker_gpus(args.gpus),
            restart=args.restart,
            # a stop (a replacement's delete, a destroy, docker stop) lets vLLM finish what it serves (drain_seconds)
            stop_timeout=stop_seconds(args), destroy_grace_seconds=stop_seconds(args),
            # absent when unset (stacks before issue 45: no diff); no swap beyond it
            **({"memory": memory_megabytes(args.memory_gib), "memory_swap": memory_megabytes(args.memory_gib)}
               if args.memory_gib else {}),
        ), pulumi.ResourceOptions(parent=self, delete_before_replace=args.delete_before_replace,
                                  depends_on=opts.depends_on if opts else None))
        host = args.address or ("127.0.0.1" if args.bind_address in ("0.0.0.0", "127.0.0.1") else args.bind_address)
        # this machine's own servers are polled on loopback (as before); a remote host's at its address
        self.ready = ReadinessWait(f"{name}-ready", ReadinessWaitArgs(
            container_id=self.container.id, container_name=args.container_name,
            url=f"http://{args.address or '127.0.0.1'}:{args.port}/v1/models", contains=f'"{args.served_name}"',
            timeout=args.ready_timeout, docker_host=args.docker_host, ssh_bin=args.ssh_bin,
            auth=api_key.apply(lambda k: f"Bearer {k}" if k else "") if args.has_api_key else "",
            recheck=args.recheck, recheck_id=args.recheck_id),
            pulumi.ResourceOptions(parent=self))
        # what the stack's outputs say of it: serving once its wait passed (an up fails while it does not)
        trouble = f"serving (answered again at the last up after: {args.trouble})" if args.trouble else "serving"
        self.state = pulumi.Output.all(self.container.id, self.ready.command.id).apply(
            lambda v: trouble if v[0] == args.recheck_id else "serving")
        self.base_url = pulumi.Output.from_input(f"http://{host}:{args.port}/v1")
        self.served_name = pulumi.Output.from_input(args.served_name)
        self.container_id = self.container.id
        self.port = args.port
        self.register_outputs({"base_url": self.base_url, "served_name": self.served_name,
                               "container_id": self.container_id})


def server_env(args: VllmServerArgs) -> dict[str, str]:
    """The container's environment: the CPU binding's default, the compile cache's and the streamer's variables,
    the stack's and the model's env, the KV cache space, and where a mounted model's weights are."""
    env = {**cpu_binding(args.gpus), **(COMPILE_CACHE_ENV if args.compile_cache else {}),
           **(streamer.TIMEOUTS if args.streamed else {}), **dict(args.env),
           **({"VLLM_CPU_KVCACHE_SPACE": f"{args.kv_cache_space_gib:g}"} if args.kv_cache_space_gib else {}),
           **(streamer.env(args.s3_endpoint, bool(args.ca_bundle)) if args.streamed else {})}
    if not args.streamed and args.weights_dir is None:
        env["RV_MODEL_DIR"] = args.model_dir
    return env


def change_parts(args: VllmServerArgs, image: str, revision: str, api_key: str) -> dict[str, str]:
    """What replaces the server's container, a digest each (components.docker.change_order): its port and name are
    the slot's, not parts, and what Docker changes in place (restart policy, memory limit) is none either.
    ``image``, ``revision`` and ``api_key`` are the plain values behind args' outputs."""
    here = dataclasses.replace(args, port=0)
    return {"image": digest(image), "vLLM arguments": digest(vllm_argv(here)),
            "environment": digest(sorted(server_env(here).items())),
            "weights": digest([revision, args.load_format, args.copy_generation, args.mount_path]),
            "API key": digest(api_key), "stop timeout": digest(stop_seconds(args)),
            "resources": digest([args.shm_size, args.gpus, args.compile_cache])}


def digest(value: object) -> str:
    """A short digest of a JSON-able value (a change part)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def memory_megabytes(gib: float) -> int:
    """models[].memoryGib as pulumi-docker's ``memory`` (MiB)."""
    return max(6, int(gib * 1024))


def _compile_cache(name: str, args: VllmServerArgs, parent: pulumi.Resource) -> docker.Volume:
    """The model's compile-cache volume on its host, named by the image and the model's revision: a
    new image or new weights get a new, empty volume (the old one is deleted after the container
    that used it), so no cache outlives what it was compiled for."""
    volume_name = pulumi.Output.all(args.image_id, args.revision).apply(
        lambda v: f"{args.container_name}-compile-{hashlib.sha256(f'{v[0]}|{v[1]}'.encode()).hexdigest()[:12]}")
    return docker.Volume(f"{name}-compile-cache", name=volume_name, labels=[
        docker.VolumeLabelArgs(label=lbl.label, value=lbl.value)
        for lbl in labels(args.stack, "compile-cache", model=args.served_name)],
        # in a side-by-side change (a new container name, so a new volume name) made before the old one goes, so that
        # the old server using it is not taken down first (a delete-first replacement removes what depends on it
        # before); else delete-first as its container (create-first, its old volume, still in use by a container
        # kept in place, could not be deleted: tried, "last state: in_use")
        opts=pulumi.ResourceOptions(parent=parent, delete_before_replace=args.delete_before_replace))


def _mounts(args: VllmServerArgs, cache: Optional[docker.Volume] = None) -> Optional[list[docker.ContainerMountArgs]]:
    """The weights: the mount root at /models (rslave: re-made mounts reach the container), or the
    host's local copy of the model at /models/<prefix> (a plain folder), or nothing (streamed); and
    the compile-cache volume when there is one."""
    cached = [docker.ContainerMountArgs(type="volume", source=cache.name, target=COMPILE_CACHE)] if cache else []
    if args.streamed:
        return cached or None
    if args.weights_dir is not None:
        return [docker.ContainerMountArgs(type="bind", source=args.weights_dir, target=args.model_dir, read_only=True),
                *cached]
    return [docker.ContainerMountArgs(
        type="bind", source=args.mount_path, target="/models", read_only=True,
        bind_options=docker.ContainerMountBindOptionsArgs(propagation="rslave")), *cached]


def _uploads(args: VllmServerArgs, api_key: pulumi.Output[str]) -> Optional[pulumi.Output[list]]:
    """The secret files uploaded into the container: the API key's --config file, the streamer's keys."""
    parts: list[pulumi.Output[list]] = []
    if args.has_api_key:
        parts.append(api_key.apply(lambda k: [docker.ContainerUploadArgs(
            file=API_KEY_CONFIG, content=f"api-key: {json.dumps(k)}\n", permissions="0444")]))
    if args.streamed:
        parts.append(streamer.uploads(args.access_key, args.secret_key, args.ca_bundle))
    if not parts:
        return None
    return pulumi.Output.secret(pulumi.Output.all(*parts).apply(lambda lists: [u for part in lists for u in part]))
