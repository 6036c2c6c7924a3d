"""Running rclone for a mount, and keeping it running: in the foreground under the supervisor
(``mount_tool.py rustfs-vllm-mount-supervisor MOUNT RCLONE mount ...``, a session of its own: when
rclone dies it unmounts the dead mount and mounts again within seconds, without waiting for ``pulumi
up``), or in the mount's keeper container (keeper_tool.py, which runs ``mount_tool.py
rustfs-vllm-mount-supervisor MOUNT --keep SPEC``); and rclone's log, read from where an attempt
started.

Standard library only, Python 3.9+, nothing from the ``components`` package: a part of the mount
tool, shipped with mount_tool.py to remote serving hosts (HostTools). It is loaded as
``components.mounting.supervisor`` in the program and, where mount_tool.py runs as a file, from beside it
(mount_tool.PARTS).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Callable, List, Mapping

from .tool_base import Fail, _quiet, sibling, without

SUPERVISOR = "rustfs-vllm-mount-supervisor"
DROPPED_FROM_RCLONE = ("AWS_CA_BUNDLE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
# what the supervisor and the keepers run: the mount tool's entry point, beside this file
TOOL = os.path.realpath(os.path.join(os.path.dirname(os.path.realpath(__file__)), "mount_tool.py"))


def supervise(mount: str, cmd: List[str]) -> int:
    """rclone in the foreground; when it exits (killed, crashed), the dead mount is removed and
    rclone starts again after 2 s. Runs until it is killed (unmount stops it)."""
    while True:
        try:
            subprocess.run(cmd, check=False)
        except OSError as exc:
            print(f"rustfs-vllm: cannot run {cmd[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        _quiet(["fusermount3", "-uz", mount])
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        print(f"{stamp} rustfs-vllm: rclone for {mount} exited; mounting again in 2 s", file=sys.stderr, flush=True)
        time.sleep(2)


def start_supervisor(mount: str, cmd: List[str], log: str, env: Mapping[str, str]) -> None:
    """The supervisor of ``cmd`` in a session of its own: it outlives the Pulumi run that started
    it. Its environment holds rclone's config variables and none of the AWS ones (AWS_CA_BUNDLE in
    particular breaks some rclone builds); its output goes to the log, never to our caller, and it
    keeps no other file of ours open."""
    argv = [sys.executable or "python3", TOOL, SUPERVISOR, mount, *cmd]
    with os.fdopen(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600), "ab") as out:
        subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, close_fds=True,
                         start_new_session=True, env=without(env, DROPPED_FROM_RCLONE))


def start_keeper(env: Mapping[str, str], point: str, cmd: List[str], log: str) -> str:
    """The mount's keeper container (RV_KEEPER_IMAGE, RV_KEEPER_NAME, RV_SPEC, RV_STACK: keeper_tool),
    the mount tool and rclone installed root-owned outside any checkout and its spec written first;
    "" when no keeper is asked for (the supervisor is started instead)."""
    image, name, spec = env.get("RV_KEEPER_IMAGE"), env.get("RV_KEEPER_NAME"), env.get("RV_SPEC")
    if not image or not name or not spec:
        return ""
    tools = sibling("keeper_tool")
    os.close(tools.root_folder(os.path.dirname(log)))     # root writes it at every start: root's folder alone
    home, rclone = tools.install(os.path.dirname(TOOL), cmd[0])
    tools.write_spec(spec, {"mount": point, "root": os.path.realpath(env["RV_ROOT"]), "cmd": [rclone, *cmd[1:]],
                            "log": log, "stack": env.get("RV_STACK") or "",
                            "read_ahead_kb": int(env.get("RV_READ_AHEAD_KB") or 0),
                            "env": {k: v for k, v in env.items() if k.startswith("RCLONE_CONFIG_")}})
    tools.remove_spec(env.get("RV_SPEC_BEFORE") or "")   # where an older version of the program kept it
    argv = [tools.host_python(), "-I", "-B", os.path.join(home, "mount_tool.py"), SUPERVISOR, point, "--keep", spec]
    tools.start_keeper(name, image, point, env.get("RV_STACK") or "", argv)
    return name


class Log:
    """rclone's log file, read from where this attempt started."""

    def __init__(self, path: str) -> None:
        self.path = path
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, mode=0o700, exist_ok=True)
        if path != os.devnull:
            try:
                os.close(self.opened(os.O_CREAT))
            except OSError as exc:
                link = os.path.islink(path)
                raise Fail(f"rclone's log {path} " + (f"is a symbolic link (to {os.readlink(path)}): root does not "
                           "write through it; remove it" if link else f"cannot be opened: {exc.strerror}")) from None
        self.start = self._size()

    def opened(self, flags: int = 0) -> int:
        """The log opened for append, never through a link planted where it goes."""
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | flags, 0o600)

    def _size(self) -> int:
        try:
            return os.path.getsize(self.path) if os.path.isfile(self.path) else 0
        except OSError:
            return 0

    def text(self) -> str:
        """What this attempt wrote (all of the file when it was rotated since: keeper_tool.rotate_log)."""
        if self._size() < self.start:
            self.start = 0
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.start)
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def lines(self, keep: Callable[[str], bool] = lambda line: True, last: int = 15) -> str:
        """The last ``last`` lines this attempt wrote that ``keep`` accepts."""
        return "\n".join([ln for ln in self.text().splitlines() if keep(ln)][-last:])

    def append(self, line: str) -> None:
        """One line of ours at the end of the log (best effort: a log that cannot be written is skipped)."""
        try:
            with os.fdopen(self.opened(), "a", encoding="utf-8") as fh:
                fh.write(line.rstrip("\n") + "\n")
        except OSError:
            pass
