#!/usr/bin/env python3
"""The read-only rclone FUSE mounts of the models, and their VFS cache: the one implementation of
``scripts/rclone-mount root-up|root-down|mount|unmount|cache-up|cache-down [--env-stdin]``, and of
the checks the program makes on them (what is mounted at a path, the mount root's self-bind, a
live mount).

Standard library only, Python 3.9 or newer, and nothing from the ``components`` package: HostTools
ships this file and its parts (PARTS, the files beside it, one job each) beside the ``rclone-mount``
launcher to remote serving hosts, which only have ``python3``. This file is the entry point (the
actions, their variables, the exit status) and re-exports its parts' names, which the program, the
tests, copy_tool (``mt``) and keeper_tool (``h``) use from here:

- tool_base.py: Fail, the parameters, the commands run, the loader of copy_tool and keeper_tool
- mountinfo.py: the mount table (/proc/self/mountinfo): mounted_at, is_self_bind
- supervisor.py: rclone run and kept running (the supervisor, or the keeper container), its log
- mount_procs.py: a mount's rclone and supervisor processes, mount_state, unmount_one
- mount_hints.py: the rclone preflight and the hints that explain a failure (AUTH_CODES, *_HINT)
- mount_root.py: root-up and root-down (the shared self-bind that makes mounts visible to containers)
- model_mount.py: mount and unmount (a model's mount, until its files are visible)
- vfs_cache.py: cache-up and cache-down, and a mount's cache read ahead (the keeper's, once mounted)
- warm.py: the warm-up (a model's files read through its mount, in parallel, into rclone's VFS cache)

Layout: the mount root RV_ROOT (mountPath) is a bind mount of itself with shared propagation;
each model's prefix is mounted read-only at RV_ROOT/<prefix> by its own rclone. Containers bind
RV_ROOT with rslave propagation, so a mount made, re-made or removed under it after a container
started reaches that container: re-mounting one model (rclone died, new credentials, new
flags) never needs its container replaced, and adding a model never touches the others.

Called by the program's pulumi-command Commands. Everything comes from the environment, never
from argv, so ``ps`` shows no credential:

- RV_ROOT: the mount root (root-up, root-down, mount, unmount)
- RV_RCLONE: rclone binary; RV_REMOTE: remote name (RCLONE_CONFIG_<REMOTE>_* hold the endpoint
  and credentials); RV_SOURCE: bucket/prefix to mount; RV_MOUNT: mount point (RV_ROOT/<prefix>);
  RV_CACHE_DIR: rclone --cache-dir for this mount; RV_FLAGS: extra mount flags, one per line;
  RV_MOUNT_COMMAND: mount (default) or mount2; RV_READ_AHEAD_KB: the mount's bdi read-ahead, set after
  every mount (by the keeper too), 0 or unset: the kernel's
- RV_CA_CERT: PEM CA bundle that verifies an https endpoint (rclone --ca-cert); rclone ignores
  AWS_CA_BUNDLE, and the supervisor's environment drops it anyway
- RV_EXPECT: JSON {file: [size, sha256 or ""]} that must be visible, with that content, before
  ``mount`` returns (sha256 is checked for files it is given for); RV_WAIT_SECONDS: how long to
  wait for them (default 60)
- RV_LOG: rclone's log file (rclone's --log-file, rotated by rclone above RV_LOG_MAX_MB, default
  keeper_tool.LOG_MAX_MB, one older file kept); under a keeper it must be in a folder of root's alone
  (keeper_tool.root_folder: the program puts it in /var/log/rustfs-vllm/<namePrefix>)
- RV_WARM ("0": off), RV_WARM_SECONDS (default 300): a mount made again over a cache that had the model
  warms it before returning (model_mount.WARM_SECONDS), so `up` replaces the container after it
- RV_MARKER: file recording the mount's generation RV_GENERATION (written on mount, removed on
  unmount): the program compares it with what is mounted to notice a dead mount
- RV_KEEPER_IMAGE, RV_KEEPER_NAME, RV_SPEC, RV_STACK: the mount's keeper container (keeper_tool.py):
  its image, its name, the mode-0600 spec it reads (rclone's argv and credentials) and the stack
  whose vLLM containers it starts once mounted; without them rclone runs under the supervisor
  below instead (a mount that a host restart does not bring back)
- RV_MOUNTS: ``mount-states`` only: JSON {key: {"marker": RV_MARKER, "mount": RV_MOUNT}}; it prints
  {key: {"generation": the marker's or null, "state": "live", "dead" or ""}} and changes nothing
- RV_CACHE_ROOT: the stack's cache folder (mountCacheDir), one rclone --cache-dir per model in it;
  RV_PURGE: "1": cache-down removes the caches (purgeOnDestroy); else it says where they are. A fresh
  order (``purge-order``, at the start of `pulumi destroy`, with purgeOnDestroy as the configuration
  says then; root's, in /var/lib/rustfs-vllm/purge-orders: vfs_cache.order_file) wins over it, here
  and in copy-down

rclone runs in the foreground under a small supervisor (this file, run as
``mount_tool.py rustfs-vllm-mount-supervisor MOUNT RCLONE mount ...`` in its own session): when
rclone dies the supervisor unmounts the dead mount and mounts again within seconds, without
waiting for ``pulumi up``.

On a remote serving host the program runs the launcher's copy there (HostTools installs it) as
``rclone-mount ACTION --env-stdin``: the variables above then come on stdin, one NAME=<base64>
line each, so neither the SSH command line nor sshd's AcceptEnv ever sees a credential.
"""
from __future__ import annotations

import base64
import binascii
import os
import sys
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Mapping, Sequence, TextIO

USAGE = ("usage: rclone-mount root-up|root-down|mount|unmount|cache-up|cache-down|copy-up|copy-down|mount-states|warm|"
         "purge-order "
         "[--env-stdin]")
# the parts beside this file, in the order they load (each only needs the ones before it); HostTools ships them
PARTS = ("warm", "tool_base", "mountinfo", "supervisor", "mount_procs", "mount_hints", "mount_root", "model_mount",
         "vfs_cache")
FILE_PACKAGE = "rustfs_vllm_mount_tool"


def _parts() -> List[Any]:
    """The PARTS: ``components.mounting.<part>`` in the program. Where this file runs or is loaded as a
    file (a host's tools folder, the launcher, a keeper container) its folder is made the package
    FILE_PACKAGE first, so that the parts beside it load (and import each other) the same way."""
    import importlib

    package = __package__
    if not package:
        import importlib.machinery
        import importlib.util

        package, here = FILE_PACKAGE, os.path.dirname(os.path.realpath(__file__))
        if package not in sys.modules:
            spec = importlib.machinery.ModuleSpec(package, None, is_package=True)
            spec.submodule_search_locations = [here]
            sys.modules[package] = importlib.util.module_from_spec(spec)
    try:
        return [importlib.import_module(f"{package}.{part}") for part in PARTS]
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith(f"{package}."):
            raise
        raise ImportError(f"{exc.name.rsplit('.', 1)[1]}.py is missing beside {os.path.realpath(__file__)}: "
                          "the host's tools are incomplete (run pulumi up again)") from None


warm, tool_base, mountinfo, supervisor, mount_procs, mount_hints, mount_root, model_mount, vfs_cache = _parts()

# ---------------------------------------------------------------- the parts' names, used from here
Fail, sibling, _SIBLINGS = tool_base.Fail, tool_base.sibling, tool_base._SIBLINGS
_need, _remote, without = tool_base._need, tool_base._remote, tool_base.without
_quiet, _checked, _rmdir = tool_base._quiet, tool_base._checked, tool_base._rmdir
FUSE, Mount, _OCTAL, unescape = mountinfo.FUSE, mountinfo.Mount, mountinfo._OCTAL, mountinfo.unescape
parse_mountinfo, mount_table = mountinfo.parse_mountinfo, mountinfo.mount_table
mounted_at, is_self_bind = mountinfo.mounted_at, mountinfo.is_self_bind
set_read_ahead, read_ahead = mountinfo.set_read_ahead, mountinfo.read_ahead
SUPERVISOR, DROPPED_FROM_RCLONE, Log = supervisor.SUPERVISOR, supervisor.DROPPED_FROM_RCLONE, supervisor.Log
supervise, start_supervisor, start_keeper = supervisor.supervise, supervisor.start_supervisor, supervisor.start_keeper
processes, _is_at, _kill = mount_procs.processes, mount_procs._is_at, mount_procs._kill
is_supervisor, is_rclone_mount = mount_procs.is_supervisor, mount_procs.is_rclone_mount
supervisor_pids, rclone_pids = mount_procs.supervisor_pids, mount_procs.rclone_pids
answers, mount_state, unmount_one = mount_procs.answers, mount_procs.mount_state, mount_procs.unmount_one
CA_HINT, AUTH_HINT, ENDPOINT_HINT = mount_hints.CA_HINT, mount_hints.AUTH_HINT, mount_hints.ENDPOINT_HINT
AUTH_CODES, TLS_WORDS, UNREACHABLE_WORDS = mount_hints.AUTH_CODES, mount_hints.TLS_WORDS, mount_hints.UNREACHABLE_WORDS
lsf_cause, lsf_hint, preflight = mount_hints.lsf_cause, mount_hints.lsf_hint, mount_hints.preflight
root_up, root_down = mount_root.root_up, mount_root.root_down
mount, unmount, fail_mount = model_mount.mount, model_mount.unmount, model_mount.fail_mount
visibility_problem, wait_visible = model_mount.visibility_problem, model_mount.wait_visible
fuse_device, _mount_point_ready = model_mount.fuse_device, model_mount._mount_point_ready
_ca_flags, _wait_mounted, remove_marker = model_mount._ca_flags, model_mount._wait_mounted, model_mount.remove_marker
mount_states, warm_now, warm_mount = model_mount.mount_states, model_mount.warm_now, model_mount.warm_mount
cache_up, cache_down, _size_of = vfs_cache.cache_up, vfs_cache.cache_down, vfs_cache._size_of
purge_asked, purge_order, order_file = vfs_cache.purge_asked, vfs_cache.purge_order, vfs_cache.order_file
read_cache_ahead = vfs_cache.read_cache_ahead

ACTIONS: Dict[str, Callable[[Mapping[str, str]], None]] = {
    "root-up": root_up, "root-down": root_down, "mount": mount, "unmount": unmount,
    "cache-up": cache_up, "cache-down": cache_down, "warm": warm_mount, "purge-order": purge_order,
}


# --------------------------------------------------------------------------- entry point
def read_env_stdin(stream: TextIO, env: Dict[str, str]) -> None:
    """``NAME=<base64 of the value>`` lines into ``env``: RV_* and RCLONE_CONFIG_* only."""
    for line in stream:
        name, _, value = line.rstrip("\n").partition("=")
        if name.startswith(("RV_", "RCLONE_CONFIG_")):
            try:
                env[name] = base64.b64decode(value).decode("utf-8", "surrogateescape")
            except (binascii.Error, ValueError):
                raise Fail(f"{name} on stdin is not base64") from None
        elif name:
            print(f"rclone-mount: ignoring unexpected variable {name} on stdin", file=sys.stderr)


def run(action: str, env: Dict[str, str]) -> None:
    """Run one action with ``env`` (the process environment, or what came on stdin on top of it)."""
    if action == "mount-states":     # read only: the markers and mounts the program asks about
        import json

        print(json.dumps(mount_states(env)))
        return
    if action.startswith("copy-"):
        sibling("copy_tool").run(action, env, SimpleNamespace(**globals()))   # this module's helpers
        return
    if action.startswith("cache-") or action == "purge-order":
        _need(env, "RV_CACHE_ROOT")
    if action.startswith("cache-") or action in ("warm", "purge-order"):
        env["RV_ROOT"] = env.get("RV_ROOT") or "/nonexistent"
    _need(env, "RV_ROOT")
    handler = ACTIONS.get(action)
    if handler is None:
        raise Fail(f"unknown action {action}")
    handler(env)


def main(argv: Sequence[str]) -> int:
    """``ACTION [--env-stdin]``, or the supervisor's ``rustfs-vllm-mount-supervisor MOUNT CMD...``."""
    if len(argv) == 4 and argv[0] == SUPERVISOR and argv[2] == "--keep":
        return sibling("keeper_tool").keep(argv[3], SimpleNamespace(**globals()))
    if len(argv) >= 3 and argv[0] == SUPERVISOR:
        return supervise(argv[1], list(argv[2:]))
    try:
        if not argv or not argv[0]:
            raise Fail(USAGE)
        env = dict(os.environ)
        if len(argv) > 1 and argv[1] == "--env-stdin":
            read_env_stdin(sys.stdin, env)
        run(argv[0], env)
    except Fail as exc:
        sys.stdout.flush()
        print(f"rclone-mount: {exc}", file=sys.stderr)
        return exc.code
    except (OSError, ValueError) as exc:     # a folder it cannot make, a bad RV_EXPECT or RV_WAIT_SECONDS
        sys.stdout.flush()
        print(f"rclone-mount: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
