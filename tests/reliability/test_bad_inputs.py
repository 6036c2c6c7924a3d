"""Bad inputs, each tried for real through the engine: `pulumi preview` (or `up`, where the problem
can only show at the first affected step) fails with a message naming the key or path, the value
and what is allowed, and nothing is left on the machine: no container, no volume, no mount, no
bucket, no object."""
from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from tests import s3_under_test
from tests.helpers import ROOT, free_port, make_model
from tests.pulumi_cli import Stack
from tests.reliability.conftest import ACCESS, SECRET, leftovers
from tests.s3_under_test import ExternalServer, stack_settings

VLLM_IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"
RESULTS = ROOT / ".state" / f"reliability-bad-inputs-{s3_under_test.KIND}.json"
_results: list[dict] = []


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(ROOT, f"rel-{secrets.token_hex(3)}")
    s.init()
    s.tmp = tmp_path_factory.mktemp("bad")  # type: ignore[attr-defined]
    yield s
    s.run("destroy", "--yes", "--skip-preview", check=False)
    s.remove()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(_results, indent=2))


def base(stack: Stack) -> dict:
    tmp: Path = stack.tmp  # type: ignore[attr-defined]
    model = make_model(tmp / "model", max_positions=2048) if not (tmp / "model").exists() else tmp / "model"
    return {
        "environment": "test", "namePrefix": stack.name, **stack_settings(),
        "rustfsPort": free_port(), "bindAddress": "127.0.0.1", "bucket": "rel-models",
        "mountPath": f"/mnt/{stack.name}", "mountCacheDir": str(tmp / "cache"), "vllmImage": VLLM_IMAGE,
        "models": [{"name": "m", "source": str(model), "port": free_port(), "kvCacheSpaceGib": 1,
                    "loadFormat": "mount"}],   # several bad inputs are the mount's (mountFlags, mountPath)
    }


def set_credentials(stack: Stack, access: str = ACCESS, secret: str = SECRET) -> None:
    stack.set("rustfsAccessKey", access, secret=True)
    stack.set("rustfsSecretKey", secret, secret=True)


def model_fields(**fields) -> Callable[[dict, Stack], None]:
    def change(cfg, stack):
        cfg["models"][0].update(fields)
    return change


def top(**values) -> Callable[[dict, Stack], None]:
    def change(cfg, stack):
        cfg.update(values)
    return change


def model_folder(build: Callable[[Path], None]) -> Callable[[dict, Stack], None]:
    def change(cfg, stack):
        folder = stack.tmp / f"m-{secrets.token_hex(3)}"  # type: ignore[attr-defined]
        make_model(folder)
        build(folder)
        cfg["models"][0]["source"] = str(folder)
    return change


def two_models(**second) -> Callable[[dict, Stack], None]:
    def change(cfg, stack):
        other = make_model(stack.tmp / "model2", seed=2)  # type: ignore[attr-defined]
        cfg["models"].append({"name": "m2", "source": str(other), "port": free_port(), **second})
    return change


def _nonempty_mount(cfg, stack):
    folder = stack.tmp / "full-mount"  # type: ignore[attr-defined]
    folder.mkdir(exist_ok=True)
    (folder / "precious.txt").write_text("keep me")
    cfg["mountPath"] = str(folder)


def _mounted(cfg, stack):
    folder = stack.tmp / "tmpfs-mount"  # type: ignore[attr-defined]
    folder.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(folder)], check=True)
    stack.cleanup.append(lambda: subprocess.run(["umount", str(folder)], check=False))  # type: ignore[attr-defined]
    cfg["mountPath"] = str(folder)


def _port_in_use(cfg, stack):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    stack.cleanup.append(sock.close)  # type: ignore[attr-defined]
    cfg["models"][0]["port"] = sock.getsockname()[1]
    stack.expect_value = str(sock.getsockname()[1])  # type: ignore[attr-defined]


def _s3_port_in_use(cfg, stack):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    stack.cleanup.append(sock.close)  # type: ignore[attr-defined]
    cfg["rustfsPort"] = sock.getsockname()[1]
    stack.expect_value = str(sock.getsockname()[1])  # type: ignore[attr-defined]


def _default_credentials(cfg, stack):
    cfg["environment"] = "production"
    cfg["s3Server"] = "rustfs"
    cfg["rustfsImage"] = stack_settings()["rustfsImage"]  # present, so only the credentials are wrong
    stack.no_credentials = True  # type: ignore[attr-defined]


def _volume_of_the_stand_in(cfg, stack):
    """A volume the rclone serve s3 stand-in wrote (objects as plain files), then s3Server: rustfs."""
    import docker

    name = f"{stack.name}-old-standin"
    volume = docker.from_env().volumes.create(name)
    stack.cleanup.append(lambda: volume.remove(force=True))  # type: ignore[attr-defined]
    obj = Path(volume.attrs["Mountpoint"]) / "rel-models" / "m" / "config.json"
    obj.parent.mkdir(parents=True)
    obj.write_text("{}")
    cfg.update(s3Server="rustfs", rustfsImage=s3_under_test.RUSTFS_IMAGE, rustfsVolume=name)
    stack.expect_value = name  # type: ignore[attr-defined]


def _plain_secret(cfg, stack):
    cfg["vllmApiKey"] = "plain-text-api-key-0001"


def _unknown_key(cfg, stack):
    cfg["mountFlag"] = ["--dir-cache-time", "10s"]


def _foreign_container(cfg, stack):
    """A container with the name this stack gives its vLLM container, made by hand (no stack label)."""
    import docker

    name = f"{stack.name}-vllm-m"
    c = docker.from_env().containers.create(s3_under_test.STANDIN_IMAGE, ["version"], name=name,
                                            labels={"made-by": "hand"})
    stack.cleanup.append(lambda: c.remove(force=True))  # type: ignore[attr-defined]
    stack.expect_value = f"the container {name!r} exists and is not this stack's"  # type: ignore[attr-defined]


def _same_port(cfg, stack):
    two_models()(cfg, stack)
    cfg["models"][1]["port"] = cfg["models"][0]["port"]


def _dangling_link(folder: Path) -> None:
    os.symlink("../gone.json", folder / "extra.json")


def _no_weights(folder: Path) -> None:
    (folder / "model.safetensors").unlink()


def _dir_link(folder: Path) -> None:
    os.symlink("..", folder / "parent")


# id, change, fragments that must all be in the output (key/path, value, what is allowed)
PREVIEW_CASES = [
    ("missing model folder", model_fields(source="/nonexistent/model"),
     ["models[m].source", "/nonexistent/model", "an existing local folder"]),
    ("folder without weights", model_folder(_no_weights), ["models[m].source", "weights (*.safetensors"]),
    ("dangling symlink in the folder", model_folder(_dangling_link),
     ["models[m].source", "no dangling symlinks", "extra.json -> ../gone.json"]),
    ("link to a folder ('..')", model_folder(_dir_link), ["models[m].source", "no links to folders", "parent -> .."]),
    ("invalid bucket name", top(bucket="Models_2026"), ["rustfs-vllm:bucket", "Models_2026", "3-63 characters"]),
    ("prefix collision", two_models(prefix="M"), ["models[m2].prefix", "'M'", "collides with model 'm'"]),
    ("duplicate served names", two_models(name="m"), ["models[m].name", "duplicate"]),
    ("model port already in use", _port_in_use, ["models[m].port", "already listens"]),
    ("S3 port already in use", _s3_port_in_use, ["rustfs-vllm:rustfsPort", "already listens"]),
    ("two models on one port", _same_port, ["models[m2].port", "a port of its own"]),
    ("mount path is a non-empty folder", _nonempty_mount, ["rustfs-vllm:mountPath", "it has files"]),
    ("mount path already mounted", _mounted, ["rustfs-vllm:mountPath", "a tmpfs filesystem is"]),
    ("rclone missing", top(rcloneBinary="/opt/none/rclone"), ["rustfs-vllm:rcloneBinary", "/opt/none/rclone",
                                                              "an rclone executable"]),
    ("vLLM image missing", top(vllmImage="rustfs-vllm/no-such-vllm:1"),
     ["rustfs-vllm:vllmImage", "rustfs-vllm/no-such-vllm:1", "an image present on this Docker host"]),
    ("gpu_memory_utilization 0", model_fields(gpuMemoryUtilization=0, kvCacheSpaceGib=None),
     ["models[m].gpuMemoryUtilization", "= 0", "(0, 1]"]),
    ("gpu_memory_utilization 1.5", model_fields(gpuMemoryUtilization=1.5, kvCacheSpaceGib=None),
     ["models[m].gpuMemoryUtilization", "1.5", "(0, 1]"]),
    ("KV cache larger than memory", model_fields(kvCacheSpaceGib=4096),
     ["models[m].kvCacheSpaceGib", "4096", "at most this machine's memory"]),
    ("max_model_len above the model's", model_fields(maxModelLen=100000),
     ["models[m].maxModelLen", "100000", "at most the model's own context length, 2048"]),
    ("s3Server rustfs on a volume the stand-in wrote", _volume_of_the_stand_in,
     ["rustfs-vllm:rustfsVolume", "kept as plain files", "set a new rustfsVolume"]),
    ("default RustFS credentials outside dev", _default_credentials,
     ["rustfsAccessKey/rustfsSecretKey", "rustfsadmin", "only when rustfs-vllm:environment is dev"]),
    ("secret in plain text", _plain_secret, ["rustfs-vllm:vllmApiKey is set in plain text", "--secret"]),
    ("unknown config key", _unknown_key, ["rustfs-vllm:mountFlag is not a known key", "mountFlags"]),
    ("invalid S3 server kind", top(s3Server="minio"), ["rustfs-vllm:s3Server", "minio", "rustfs, rclone-serve-s3"]),
    ("invalid dtype", model_fields(dtype="int2"), ["models[m].dtype", "int2", "float32"]),
    ("external endpoint missing", top(s3Server="external"), ["rustfs-vllm:rustfsEndpoint", "required"]),
    ("mount flag with a credential", top(mountFlags=["--s3-secret-access-key", "x"]),
     ["rustfs-vllm:mountFlags", "--s3-secret-access-key", "credentials reach rclone through its environment"]),
    ("restart policy", top(vllmRestart="sometimes"), ["rustfs-vllm:vllmRestart", "sometimes", "unless-stopped"]),
    ("GPUs on a Docker host without them", top(vllmGpus="all"),
     ["rustfs-vllm:vllmGpus = 'all'", "no NVIDIA runtime", "NVIDIA Container Toolkit"]),
    ("a model's GPUs on a Docker host without them", model_fields(gpus="0,1"),
     ["rustfs-vllm:models[m].gpus = '0,1'", "NVIDIA Container Toolkit"]),
    ("a container of the stack's name made by hand", _foreign_container,
     ["rustfs-vllm:namePrefix", "no label says who made it", "docker rm -f"]),
    ("readKeys scoped on rclone serve s3", top(s3Server="rclone-serve-s3", readKeys="scoped",
                                               rustfsImage=s3_under_test.STANDIN_IMAGE),
     ["rustfs-vllm:readKeys = 'scoped' is invalid", "shared with s3Server rclone-serve-s3"]),
    ("readKeys of another kind", top(readKeys="narrow"), ["rustfs-vllm:readKeys = 'narrow'", "one of scoped, shared"]),
]


def _check_clean(stack: Stack, cfg: dict) -> None:
    assert leftovers(stack.name, cfg["mountPath"], f"{stack.name}-data") == []


@pytest.mark.parametrize("change,fragments", [c[1:] for c in PREVIEW_CASES], ids=[c[0] for c in PREVIEW_CASES])
def test_bad_input_fails_at_preview_leaving_nothing(stack, request, change, fragments):
    stack.cleanup, stack.expect_value, stack.no_credentials = [], None, False  # type: ignore[attr-defined]
    cfg = base(stack)
    try:
        change(cfg, stack)
        cfg["models"] = [{k: v for k, v in m.items() if v is not None} for m in cfg["models"]]
        stack.write_config(cfg)
        if not stack.no_credentials:  # type: ignore[attr-defined]
            set_credentials(stack)
        proc = stack.run("preview", check=False)
        output = proc.stdout + proc.stderr
        assert proc.returncode != 0, output[-3000:]
        for fragment in fragments + ([stack.expect_value] if stack.expect_value else []):  # type: ignore[attr-defined]
            assert fragment in output, f"{fragment!r} not in:\n{output[-3000:]}"
        _check_clean(stack, cfg)
        _results.append({"case": request.node.callspec.id, "stage": "preview", "result": "rejected",
                         "message": next((line.strip() for line in output.splitlines()
                                          if fragments[0] in line), "")[:300]})
    finally:
        for undo in stack.cleanup:  # type: ignore[attr-defined]
            undo()


def test_malformed_yaml_fails_at_preview(stack):
    cfg = base(stack)
    stack.write_config(cfg, raw_text="config:\n  rustfs-vllm:bucket: [unclosed\n  rustfs-vllm:models: {\n")
    proc = stack.run("preview", check=False)
    out = proc.stdout + proc.stderr
    # the CLI parses the file before the program runs: its message names the line, not the file
    assert proc.returncode != 0 and "invalid YAML file" in out and "line" in out, out[-2000:]
    _check_clean(stack, cfg)
    _results.append({"case": "malformed YAML", "stage": "preview", "result": "rejected",
                     "message": next((ln.strip() for ln in out.splitlines() if "yaml" in ln.lower()), "")[:300]})


def test_wrong_type_fails_at_preview(stack):
    cfg = base(stack)
    cfg["rustfsPort"] = "ninety"
    stack.write_config(cfg)
    set_credentials(stack)
    proc = stack.run("preview", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "rustfsPort" in out and "integer" in out, out[-2000:]
    _check_clean(stack, cfg)
    _results.append({"case": "wrong type (rustfsPort: ninety)", "stage": "preview", "result": "rejected",
                     "message": next((ln.strip() for ln in out.splitlines() if "rustfsPort" in ln), "")[:300]})


def test_fuse_unavailable_fails_at_preview(stack, tmp_path):
    cfg = base(stack)
    stack.write_config(cfg)
    set_credentials(stack)
    fake = tmp_path / "not-a-device"
    fake.write_text("")
    # A private mount namespace in which /dev/fuse is a plain file: FUSE is unavailable there only.
    proc = stack.run("preview", check=False, prefix=(
        "unshare", "--mount", "--propagation", "private", "sh", "-c",
        f'mount --bind {fake} /dev/fuse && exec "$@"', "sh"))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "rustfs-vllm:mountPath" in out and "/dev/fuse is missing" in out, out[-2000:]
    _check_clean(stack, cfg)
    _results.append({"case": "FUSE unavailable", "stage": "preview", "result": "rejected",
                     "message": next((ln.strip() for ln in out.splitlines() if "/dev/fuse" in ln), "")[:300]})


def test_unreadable_file_is_rejected_for_an_unprivileged_user(tmp_path):
    """root reads every file, so this runs the same check as the unprivileged user nobody."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="rvllm-unreadable-"))
    try:
        os.chmod(folder, 0o755)
        make_model(folder / "model")
        os.chmod(folder / "model", 0o755)
        for p in (folder / "model").iterdir():
            os.chmod(p, 0o644)
        os.chmod(folder / "model" / "model.safetensors", 0o600)
        code = ("import sys; sys.path.insert(0, sys.argv[1]); from components.storage import layout; "
                "print(layout.folder_problems(sys.argv[2]))")
        out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                              code, str(ROOT), str(folder / "model")], capture_output=True, text=True, check=True)
        assert "model.safetensors cannot be read by this user" in out.stdout, out.stdout + out.stderr
        _results.append({"case": "unreadable file", "stage": "preview (check run as nobody)", "result": "rejected",
                         "message": out.stdout.strip()[:300]})
    finally:
        shutil.rmtree(folder)


def test_wrong_credentials_fail_at_the_credential_check_leaving_nothing(stack, tmp_path):
    external = ExternalServer(tmp_path, ACCESS, SECRET)
    try:
        cfg = base(stack)
        cfg.update(s3Server="external", rustfsEndpoint=external.endpoint)
        stack.write_config(cfg)
        set_credentials(stack, ACCESS, "definitely-not-the-secret")
        proc = stack.run("up", "--yes", "--skip-preview", check=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and "rejected the credentials" in out and "rustfsSecretKey" in out, out[-3000:]
        assert "Traceback" not in out and "RuntimeError" not in out, out[-3000:]
        assert "definitely-not-the-secret" not in out
        _check_clean(stack, cfg)
        assert not external.bucket_exists("rel-models")
        stack.run("destroy", "--yes", "--skip-preview")
    finally:
        external.remove()
    _results.append({"case": "wrong credentials", "stage": "up (credential check)", "result": "rejected",
                     "message": next((ln.strip() for ln in out.splitlines() if "rejected the credentials" in ln), "")[:300]})


def test_server_on_rustfs_default_keys_fails_naming_that_cause(stack, tmp_path):
    """A server that never received the configured keys runs on RustFS's defaults and answers
    health checks: `up` must stop at the credential check, name that cause, and create nothing.
    (RustFS started with no keys; the stand-in, NOT RustFS, given only rustfsadmin/rustfsadmin.)"""
    server = ExternalServer(tmp_path, ACCESS, SECRET, keys=False)
    try:
        cfg = base(stack)
        cfg.update(s3Server="external", rustfsEndpoint=server.endpoint)
        stack.write_config(cfg)
        set_credentials(stack)
        up = stack.run("up", "--yes", "--skip-preview", check=False)
        out = up.stdout + up.stderr
        assert up.returncode != 0 and "never received the configured ones" in out, out[-3000:]
        assert "Traceback" not in out, out[-3000:]
        _check_clean(stack, cfg)
        assert not server.bucket_exists("rel-models")
        stack.run("destroy", "--yes", "--skip-preview")
    finally:
        server.remove()
    _results.append({"case": "server runs on RustFS's default keys", "stage": "up (credential check)",
                     "result": "rejected",
                     "message": next((ln.strip() for ln in out.splitlines() if "never received" in ln), "")[:300]})


def test_unreachable_endpoint_fails_at_the_credential_check_leaving_nothing(stack):
    cfg = base(stack)
    cfg.update(s3Server="external", rustfsEndpoint=f"http://127.0.0.1:{free_port()}")
    stack.write_config(cfg)
    set_credentials(stack)
    proc = stack.run("up", "--yes", "--skip-preview", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "is unreachable" in out and "rustfsEndpoint" in out, out[-3000:]
    assert "Traceback" not in out and "RuntimeError" not in out, out[-3000:]
    _check_clean(stack, cfg)
    stack.run("destroy", "--yes", "--skip-preview")
    _results.append({"case": "S3 endpoint unreachable", "stage": "up (credential check)", "result": "rejected",
                     "message": next((ln.strip() for ln in out.splitlines() if "is unreachable" in ln), "")[:300]})


IGNORES_KEYS = "rustfs-vllm/rustfs-ignores-keys:test"


@pytest.mark.skipif(s3_under_test.KIND != "rustfs",
                    reason="needs the local RustFS image: `make test-rustfs` runs it (RUSTFS_VLLM_TEST_S3=rustfs)")
def test_rustfs_in_the_stack_that_ignores_its_keys_fails_naming_that_cause(stack, tmp_path):
    """The failure of issue 11, for real: a RustFS image whose entrypoint drops the key files starts
    on its default keys and answers health checks. `up` must stop at the credential check with a
    message naming that cause, before any bucket, mount or vLLM."""
    ctx = tmp_path / "ignores-keys"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(
        f"FROM {s3_under_test.RUSTFS_IMAGE}\nUSER root\n"
        "RUN printf '#!/bin/sh\\nunset RUSTFS_ACCESS_KEY_FILE RUSTFS_SECRET_KEY_FILE\\nexec /entrypoint.sh \"$@\"\\n'"
        " > /ignore-keys.sh && chmod 0755 /ignore-keys.sh\nUSER rustfs\n"
        'ENTRYPOINT ["/ignore-keys.sh"]\nCMD ["rustfs"]\n')
    subprocess.run(["docker", "build", "-q", "-t", IGNORES_KEYS, str(ctx)], check=True, capture_output=True)
    cfg = base(stack)
    cfg.update(s3Server="rustfs", rustfsImage=IGNORES_KEYS)
    stack.write_config(cfg)
    set_credentials(stack)
    try:
        up = stack.run("up", "--yes", "--skip-preview", check=False)
        out = up.stdout + up.stderr
        assert up.returncode != 0 and "never received the configured ones" in out, out[-3000:]
        assert ACCESS not in out and SECRET not in out
        from components.storage import s3

        on_defaults = s3.client(f"http://127.0.0.1:{cfg['rustfsPort']}", "rustfsadmin", "rustfsadmin")
        assert [b["Name"] for b in on_defaults.list_buckets().get("Buckets", [])] == []   # no bucket made
        state = json.loads(stack.run("stack", "export").stdout)
        made = [r["urn"].split("::")[-1] for r in state["deployment"].get("resources", [])]
        assert "s3-container" in made, made
        assert not [n for n in made if n.startswith(("bucket", "model-", "mount-", "vllm-")) and n != "vllm-image"], made
        stack.run("destroy", "--yes", "--skip-preview")
        subprocess.run(["docker", "volume", "rm", f"{stack.name}-data"], check=True, capture_output=True)  # retained
        _check_clean(stack, cfg)
    finally:
        stack.run("destroy", "--yes", "--skip-preview", check=False)
        subprocess.run(["docker", "volume", "rm", "-f", f"{stack.name}-data"], capture_output=True)
        subprocess.run(["docker", "image", "rm", "-f", IGNORES_KEYS], capture_output=True)
    _results.append({"case": "RustFS in the stack ignores its keys", "stage": "up (credential check)",
                     "result": "rejected",
                     "message": next((ln.strip() for ln in out.splitlines() if "never received" in ln), "")[:300]})


def _read_key_refused(stack: Stack, server: ExternalServer, keys: tuple[str, str], case: str, fragments: list[str]) -> None:
    """`up` with readKeys scoped against ``server`` with ``keys``: it stops at the read key in one line naming
    the server's answer and readKeys, leaves nothing on this machine or in the bucket, and leaks no key."""
    cfg = base(stack)
    cfg.update(s3Server="external", rustfsEndpoint=server.endpoint, readKeys="scoped")
    stack.write_config(cfg)
    set_credentials(stack, *keys)
    up = stack.run("up", "--yes", "--skip-preview", check=False)
    out = up.stdout + up.stderr
    assert up.returncode != 0, out[-3000:]
    # the first admin call is the look-up of the new user's name (a user that exists is never overwritten)
    for fragment in ["read key: look up user rvread", f"at the S3 server {server.endpoint}", *fragments,
                     "set rustfs-vllm:readKeys to shared"]:
        assert fragment in out, f"{fragment!r} not in:\n{out[-3000:]}"
    assert "Traceback" not in out and keys[1] not in out, out[-3000:]
    _check_clean(stack, cfg)
    assert not server.bucket_exists("rel-models"), "the bucket was made after the read key failed"
    stack.run("destroy", "--yes", "--skip-preview")
    _results.append({"case": case, "stage": "up (read key)", "result": "rejected",
                     "message": next((ln.strip() for ln in out.splitlines() if "read key: look up user" in ln), "")[:300]})


def test_read_keys_scoped_on_an_s3_server_without_iam_fails_at_the_read_key(stack, tmp_path):
    """An external S3 server with no users or policies (the rclone serve s3 stand-in, NOT RustFS) and readKeys
    scoped: its admin API is missing."""
    server = ExternalServer(tmp_path, ACCESS, SECRET, kind="standin")
    try:
        _read_key_refused(stack, server, (ACCESS, SECRET), "readKeys scoped, S3 server without IAM",
                          ["failed (404 NoSuchBucket", "has no RustFS/MinIO admin API"])
    finally:
        server.remove()


@pytest.mark.skipif(s3_under_test.KIND != "rustfs", reason="needs real RustFS's IAM (`make test-rustfs`)")
def test_read_keys_scoped_with_keys_without_admin_rights_fails_at_the_read_key(stack, tmp_path):
    """Real RustFS, and keys that may use the bucket but not the admin API (a user of its own with a policy of
    s3:* on every bucket), as a platform team might hand out."""
    import json as json_

    from minio import MinioAdmin
    from minio.credentials import StaticProvider

    server = ExternalServer(tmp_path, ACCESS, SECRET)
    try:
        admin = MinioAdmin(endpoint=server.endpoint.split("//", 1)[1], credentials=StaticProvider(ACCESS, SECRET),
                           secure=False)
        admin.policy_add("rel-s3-only", policy=json_.loads(json_.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": ["s3:*"], "Resource": ["arn:aws:s3:::*"]}]})))
        user = ("rel-s3-only-user-0001", "rel-s3-only-secret-0001")
        admin.user_add(*user)
        admin.policy_set("rel-s3-only", user=user[0])
        _read_key_refused(stack, server, user, "readKeys scoped, keys without admin rights",
                          ["was refused (403 AccessDenied", "have no admin rights there"])
    finally:
        server.remove()

