"""The mounted model's container entrypoint (components.serving.vllm.mount_wait_entrypoint) run by a
real /bin/sh on a folder standing for the mount: it waits for config.json, starts the warm-up
(components/mounting/warm.py's text with python3 -c) in the background and execs the server's argv
at once; the warm-up reads every file and says so in one line of the container's log (stderr)."""
from __future__ import annotations

import os
import re
import subprocess
import time

from components.serving.vllm import WARM_CODE, mount_wait_entrypoint


def run(folder, warm: bool = True, server: str = "echo serving") -> subprocess.CompletedProcess:
    sh, flag, script, name, code, *_ = mount_wait_entrypoint(warm)
    # the server: the argv after the warm-up's code; it outlives the warm-up here, as vLLM does
    return subprocess.run([sh, flag, script, name, code, "sh", "-c", f"{server}; sleep 3"], capture_output=True,
                          text=True, timeout=60, env={"RV_MODEL_DIR": str(folder), "PATH": "/usr/bin:/bin"})


def test_the_entrypoint_starts_the_warm_up_and_the_server_together(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"\0" * (40 << 20))
    t = time.monotonic()
    out = run(tmp_path)
    assert out.returncode == 0 and out.stdout == "serving\n", out
    assert f"rustfs-vllm: warm-up of {tmp_path}: 2 files, 0.04 GB in" in out.stderr, out.stderr
    assert time.monotonic() - t < 30


def test_without_the_warm_up_only_the_server_runs(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    out = run(tmp_path, warm=False)
    assert out.returncode == 0 and out.stdout == "serving\n" and "warm-up" not in out.stderr, out


def test_the_entrypoint_waits_for_the_weights_before_either(tmp_path):
    proc = subprocess.Popen(mount_wait_entrypoint()[:5] + ["echo", "serving"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={"RV_MODEL_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"})
    time.sleep(2.5)
    assert proc.poll() is None                         # no config.json yet: still waiting
    (tmp_path / "config.json").write_text("{}")
    out, err = proc.communicate(timeout=30)
    assert out == "serving\n" and "waiting for the model's mount" in err, err


def test_the_probes_of_a_part_start_at_its_first_byte_and_reach_its_last_one_stride_at_a_time():
    from components.mounting import warm

    for off, length in ((0, 40 << 20), (16 << 20, (5 << 20) + 123), (7, 100), (0, warm.PROBE)):
        at = warm.probes(off, length)
        assert at[0] == off                                          # rclone's download of the part starts here
        assert at[-1] + warm.PROBE >= off + length                   # ... and is waited for up to the part's end
        assert all(b - a <= warm.STRIDE for a, b in zip(at, at[1:]))  # never a gap rclone would open a range for
        assert all(off <= a < off + length for a in at)
    assert len(warm.probes(0, 3 << 30)) * warm.PROBE <= (3 << 30) // 200   # under 0.5% of the bytes cross FUSE


def warm_in_a_container(model, reader: str = "", short_fetch: str | None = "0") -> tuple[float, float]:
    """The warm-up's seconds and those it waited (from its line), run as the entrypoint runs it (``python3
    -c``) with BOOT_READS 1 MiB and SHORT_FETCH ``short_fetch`` (0: even a small model waits; None: as
    shipped), in a pid namespace of its own as in a container, beside ``reader`` started 0.5 s before it."""
    code = re.sub(r"(?m)^BOOT_READS = .*$", f"BOOT_READS = {1 << 20}", WARM_CODE)
    if short_fetch is not None:
        code = re.sub(r"(?m)^SHORT_FETCH = .*$", f"SHORT_FETCH = {short_fetch}", code)
    script = f'{reader} & sleep 0.5; python3 -c "$1" "$2"; wait'
    out = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script, "sh", code, str(model)],
                         capture_output=True, text=True, timeout=60)
    m = re.search(r"warm-up of \S+: 2 files, ([0-9.]+) GB in ([0-9.]+) s( \(([0-9.]+) s of them waiting)?",
                  out.stderr)
    assert m and float(m.group(1)) > 0.004, out.stderr
    return float(m.group(2)), float(m.group(4) or 0)


def test_the_warm_up_waits_while_another_process_reads_the_disk_and_goes_on_when_it_stops(tmp_path):
    """warm.BOOT_READS: a real reader of the real disk (dd, O_DIRECT: no page cache) beside the warm-up, in
    one pid namespace as vLLM and the warm-up are in its container; the warm-up sends no probe while the
    reader reads, and warms every file once it has stopped."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "w.safetensors").write_bytes(os.urandom(8 << 20))
    disk = tmp_path / "disk.bin"
    with open(disk, "wb") as f:
        f.write(os.urandom(64 << 20))
        os.fsync(f.fileno())
    reads = f"timeout 2.5 sh -c 'while :; do dd if={disk} of=/dev/null bs=1M iflag=direct 2>/dev/null; done'"
    took, waited = warm_in_a_container(model, reads)
    assert took >= 1.5 and waited >= 1.5, (took, waited)   # the reader's 2.5 s less the 0.5 s before the warm-up
    took, waited = warm_in_a_container(model, "true")
    assert took < 1.0 and waited < 0.5, (took, waited)
    # the shipped SHORT_FETCH: 8 MiB take far less than it at the pace, so the warm-up does not wait
    took, waited = warm_in_a_container(model, reads, None)
    assert took < 1.0 and waited == 0, (took, waited)


def test_a_model_too_large_for_the_pace_is_fetched_within_the_window_and_a_small_one_keeps_the_pace(tmp_path):
    """warm.FETCH_WINDOW: the entrypoint's fetch has to be done when vLLM begins to load, so a model its pace
    would take longer than the window over is fetched faster; real files read by the real warm-up."""
    from components.mounting import warm

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "w.safetensors").write_bytes(os.urandom(8 << 20))
    files = warm.files_of(str(tmp_path), [])
    assert warm.window_pace(files, 4e6, 0.5) == sum(s for _, s in files) / 0.5     # raised: 2.1 s at the pace
    assert warm.window_pace(files, 4e6, 10.0) == 4e6                               # fits: the pace as it is
    assert warm.window_pace(files, 0, 0.5) == 0 and warm.window_pace(files, 4e6, 0) == 4e6
    n, done, took, problem = warm.warm(str(tmp_path), pace=4e6)
    assert (n, done, problem) == (2, (8 << 20) + 2, "") and took >= 1.8, took       # the pace holds it back
    n, done, took, problem = warm.warm(str(tmp_path), pace=4e6, window=0.5)
    assert (n, done, problem) == (2, (8 << 20) + 2, "") and took < 1.2, took
    assert 0 < warm.FETCH_WINDOW and "window=FETCH_WINDOW" in WARM_CODE          # what the entrypoint runs
    # ... in one thread per core, at most WORKERS (the host's warm-up of a new revision keeps WORKERS)
    assert "warm(folder, seconds, min(WORKERS, cpus())," in WARM_CODE and warm.cpus() == len(os.sched_getaffinity(0))
