"""components/mounting/mount_tool.py's pure parts, on sample text: the mountinfo parser (octal escapes,
optional fields), the topmost mount at a path, the mount root's self-bind seen through a parent
that is itself a bind mount, which processes are a mount's rclone or supervisor, the rclone
preflight's hints and the --env-stdin protocol."""
from __future__ import annotations

import base64
import io

import pytest

from components.storage import layout
from components.hosts import machine
from components.mounting import mount_tool
from components.mounting.mount_tool import Mount, is_self_bind, mounted_at, parse_mountinfo

# / on vda; /data a bind mount of /srv/data from vda; /data/models a self-bind (folder /srv/data/models
# of vda, which is what /data shows at /data/models); /data/models/m1 an rclone mount over it
SAMPLE = """\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:5 / /dev rw,nosuid shared:2 - devtmpfs udev rw,size=100k
41 22 254:0 /srv/data /data rw,relatime shared:1 - ext4 /dev/vda rw
42 41 254:0 /srv/data/models /data/models rw,relatime shared:7 master:3 - ext4 /dev/vda rw
43 42 0:51 / /data/models/m1 ro,nosuid,nodev,relatime shared:8 - fuse.rclone ITEST:models/m1 ro,user_id=0
44 22 254:0 /tmp/a\\040b /tmp/a\\040b rw shared:9 - ext4 /dev/vda rw
45 22 254:0 /home/x /tmp/elsewhere rw shared:10 - ext4 /dev/vda rw
46 22 0:60 / /tmp/tab\\011and\\134back rw - tmpfs tmpfs rw
"""


@pytest.fixture
def table():
    return parse_mountinfo(SAMPLE)


def test_fields_are_unescaped_and_optional_fields_skipped(table):
    assert table[3] == Mount("254:0", "/srv/data/models", "/data/models", "ext4")
    assert table[4].fstype == "fuse.rclone" and table[4].point == "/data/models/m1"
    assert table[5].point == "/tmp/a b" and table[5].root == "/tmp/a b"
    assert table[7].point == "/tmp/tab\tand\\back" and table[7].fstype == "tmpfs"
    assert mount_tool.unescape(r"a\040b\012c") == "a b\nc"
    assert parse_mountinfo("garbage\n\n1 2 3\n") == []


def test_mounted_at_is_the_topmost_filesystem_at_exactly_that_path(table):
    assert mounted_at("/data/models/m1", table) == "fuse.rclone"
    assert mounted_at("/data/models", table) == "ext4"
    assert mounted_at("/data/models/m2", table) is None
    assert mounted_at("/tmp/tab\tand\\back", table) == "tmpfs"
    stacked = parse_mountinfo(SAMPLE + "47 42 0:52 / /data/models rw - fuse.rclone X:bucket rw\n")
    assert mounted_at("/data/models", stacked) == "fuse.rclone"


def test_self_bind_under_a_parent_bind_mount(table):
    # /data/models shows /srv/data/models of vda, and its parent /data (vda's /srv/data) has that folder there
    assert is_self_bind("/data/models", table)
    assert is_self_bind("/tmp/a b", table)                  # parent is /, escapes decoded
    assert not is_self_bind("/tmp/elsewhere", table)        # a bind of another folder (/home/x)
    assert not is_self_bind("/data", table)                 # a bind of /srv/data, not of itself
    assert not is_self_bind("/data/models/m1", table)       # another filesystem (FUSE)
    assert not is_self_bind("/data/other", table)           # nothing mounted there
    assert not is_self_bind("/tmp/tab\tand\\back", table)   # a tmpfs: another device
    # the same folder but from another device is not a self-bind
    other_dev = SAMPLE.replace("42 41 254:0 /srv/data/models", "42 41 254:9 /srv/data/models")
    assert not is_self_bind("/data/models", parse_mountinfo(other_dev))
    # mounted over (an old whole-bucket rclone mount on the root): the topmost mount is not the bind
    stacked = parse_mountinfo(SAMPLE + "47 42 0:52 / /data/models rw - fuse.rclone X:bucket rw\n")
    assert not is_self_bind("/data/models", stacked)


def test_layout_and_machine_use_the_mount_tools_checks():
    assert layout.mounted_at is mount_tool.mounted_at and layout.is_self_bind is mount_tool.is_self_bind
    assert machine.fuse_available() == mount_tool.fuse_device()


def test_which_processes_are_a_mounts_rclone_and_supervisor():
    rclone = ["/usr/bin/rclone", "mount", "ITEST:models/m1", "/data/models/m1", "--read-only"]
    supervisor = ["/usr/bin/python3", "/x/mount_tool.py", "rustfs-vllm-mount-supervisor", "/data/models/m1", *rclone]
    old_bash = ["bash", "-c", "while :; do ...", "rustfs-vllm-mount-supervisor", "/data/models/m1", *rclone]
    assert mount_tool.is_rclone_mount(rclone, "/data/models/m1")
    assert mount_tool.is_rclone_mount(rclone, "/data/models/m1", remote="ITEST")
    assert not mount_tool.is_rclone_mount(rclone, "/data/models/m1", remote="OTHER")
    assert not mount_tool.is_rclone_mount(rclone, "/data/models/m")
    assert mount_tool.is_rclone_mount(rclone, "/data/models", under=True)
    assert not mount_tool.is_rclone_mount(rclone, "/data/models")
    assert not mount_tool.is_rclone_mount(rclone[:4], "/data/models/m1")       # rclone always has flags after
    assert not mount_tool.is_rclone_mount(supervisor, "/data/models/m1")
    assert mount_tool.is_supervisor(supervisor, "/data/models/m1") and mount_tool.is_supervisor(old_bash, "/data/models/m1")
    assert mount_tool.is_supervisor(supervisor, "/data/models", under=True)
    assert not mount_tool.is_supervisor(supervisor, "/data/models") and not mount_tool.is_supervisor(rclone, "/data/models/m1")


@pytest.mark.parametrize("err, hint", [
    ("Failed: x509: certificate signed by unknown authority", "rustfsCaBundle"),
    ("...: last error was: SignatureDoesNotMatch: the signature\n", "rustfsSecretKey"),
    ("dial tcp 127.0.0.1:1: connect: connection refused", "rustfsEndpoint"),
    ("something else", "see /log"),
])
def test_preflight_hints(err, hint):
    cause = mount_tool.lsf_cause(err)
    assert hint in mount_tool.lsf_hint(cause, "/log")


def test_preflight_cause_is_the_last_error():
    err = "a: last error was: first\nNOTICE x\nb: retry: last error was: AccessDenied: no\nFailed to lsf\n"
    assert mount_tool.lsf_cause(err) == "AccessDenied: no"
    assert mount_tool.lsf_cause("one\ntwo\n") == "two"


def test_env_stdin_takes_only_our_variables(capsys):
    env: dict = {}
    lines = "".join(f"{k}={base64.b64encode(v.encode()).decode()}\n"
                    for k, v in {"RV_ROOT": "/a b", "RCLONE_CONFIG_X_SECRET_ACCESS_KEY": "s=1\n2", "PATH": "/evil"}.items())
    mount_tool.read_env_stdin(io.StringIO(lines + "\n"), env)
    assert env == {"RV_ROOT": "/a b", "RCLONE_CONFIG_X_SECRET_ACCESS_KEY": "s=1\n2"}
    assert "ignoring unexpected variable PATH on stdin" in capsys.readouterr().err
