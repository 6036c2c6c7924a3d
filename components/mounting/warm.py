"""Warm-up of a mounted model (issue 36): make rclone fetch the model's files into its VFS cache, many
parts of a file at once (ranged GETs in parallel, one per part), while vLLM is still booting; vLLM's
own reads then come from the host's disk. Best effort: an error or the deadline stops it with one line
on stderr, and it never fails anything.

It does not read the files through FUSE: it probes them. Per part, one page at the part's first byte
starts rclone's download there, then one page at the end of every STRIDE (1 MiB) waits for that
download to get there (a read within --buffer-size of a running download waits for it instead of
opening another range), with the kernel's read-ahead off for its own handle (POSIX_FADV_RANDOM). So
rclone fetches every byte, contiguously, and only 1/256 of them cross FUSE into this process. Measured
on the 3.36 GB model from RustFS (2 cores): 4.8 s and 6.8 CPU-seconds in all (RustFS 4.1, rclone 2.6,
this process 0.2) against 8.0 s and 12.4 (5.5, 4.3, 2.4) when every byte was read through the mount:
CPU that vLLM's boot, beside it, no longer loses.

Standard library only, Python 3.9+, no imports from the package: the vLLM container's entrypoint runs
this file's text with ``python3 -c`` (components.serving.vllm), and the mount tool imports it
(mount_tool.PARTS) to warm a new revision before the old container is replaced.

    python3 -c "$(cat warm.py)" FOLDER [SECONDS]

Order: the small files first (vLLM reads config and tokenizer at once), then the rest by name (the
order vLLM reads safetensors shards). Each file is cut into up to PARTS_PER_FILE parts of at least
MIN_PART bytes; WORKERS threads probe the parts in that order, so the next file starts while the last
parts of one are still coming.

In vLLM's container (main()) it gives way to vLLM's boot: while the container's other processes read the
disk (BOOT_READS), it sends no probe, unless the whole fetch is short (SHORT_FETCH); and a model too large
for its pace to fetch within FETCH_WINDOW seconds is fetched faster, within them, in one thread per core.
"""
import os
import sys
import threading
import time

WORKERS = 8
PARTS_PER_FILE = 8
MIN_PART = 16 << 20
SMALL = 1 << 20
STRIDE = 1 << 20       # one probe per MiB: far inside rclone's --buffer-size (16 MiB by default)
PROBE = 4096           # one page
# the pace: 100 MB/s per core the process may run on (200 MB/s on our 2 cores). A warm-up costs about 2
# CPU-seconds per GB on the host (RustFS 1.2, rclone 0.8, measured here), so this keeps it near a fifth of
# the host's CPU while vLLM boots beside it; unpaced it took half of it, and vLLM began to load later.
# 3.36 GB then take 17 s, inside vLLM's boot (22 s here); a 32-core GPU host's pace, 3.2 GB/s, is above
# what its network gives, so there it is no cap.
RATE_PER_CPU = 100e6
# the boot's disk reads come first: while the other processes of this container (vLLM booting, its
# libraries read from the host's disk after a restart) read more than BOOT_READS bytes from the disk in a
# TICK (10 MB/s), the entrypoint's warm-up sends no probe and its pace's clock stops (0: never wait). The
# fetch's reads of the store's disk and writes of rclone's cache otherwise queue before each of the boot's
# reads. Not for a fetch shorter than SHORT_FETCH seconds at the pace: it is done long before the load
# begins anyway, and waiting only moves it to where the boot needs the CPU. Measured (2026-12-07, 3-round
# probes, docs/PERFORMANCE.md section 17): 6.34 GB cold, first token 1.003x local with the wait against
# 1.185x without; 0.54 GB, 1.114x with it against 1.064x without. Only main() uses it: in vLLM's
# container the other processes are vLLM's; on the host they would be everything.
BOOT_READS = 2 << 20
SHORT_FETCH = 10.0
TICK = 0.2
# the entrypoint's fetch has to be done when vLLM begins to load: a model the pace would take longer than
# FETCH_WINDOW seconds to fetch (not counting the wait) is fetched in FETCH_WINDOW seconds instead, faster
# than the pace. On our 2 cores vLLM begins to load 25 s after its start, 8 s of them spent reading the disk
# (the wait): at the pace, 6.34 GB took 32 s and 61 % was in the VFS cache when the load began, first token
# 1.20x local; at twice the pace or unpaced, 100 % and 1.11-1.12x (2026-12-07, docs/PERFORMANCE.md section
# 17). Smaller models keep the pace: 3.36 GB takes 17 s at it (15 s in the window) and was whole at load
# begin in every round. Only main() uses it: the mount step's warm-up of a new revision has no boot to beat.
FETCH_WINDOW = 15.0
# and in one stream per core, at most WORKERS: each stream's reads of the store's disk queue before the
# boot's. 6.34 GB cold, unpaced, 3 rounds: first token 1.06-1.07x local in 2 streams against 1.11-1.18x in
# 8, vLLM's load beginning 2.0 s after local disk's against 4.3 s (2026-12-07, section 17). A GPU host's
# 8 cores or more keep the 8 streams that fill its pace from a store over the network.


def cpus():
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def rate():
    """Bytes per second the warm-up may fetch (RATE_PER_CPU for each core this process may run on)."""
    return RATE_PER_CPU * cpus()


def disk_reads(me):
    """Bytes the other processes of this pid namespace have read from a disk (/proc/PID/io read_bytes)."""
    total = 0
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            try:
                with open(f"/proc/{name}/io", "rb") as f:
                    for line in f:
                        if line.startswith(b"read_bytes:"):
                            total += int(line.split()[1])
                            break
            except (OSError, ValueError):
                pass
    return total


def watch_reads(busy, stop, paused, limit, tick=TICK):
    """``busy`` set while the others read more than ``limit`` bytes a ``tick``, cleared once a ``tick`` they
    read less; ``paused[0]`` the seconds it was set."""
    me, last = os.getpid(), disk_reads(os.getpid())
    while not stop.wait(tick):
        now = disk_reads(me)
        if now - last > limit:
            busy.set()
            paused[0] += tick
        else:
            busy.clear()
        last = now


def boot_watch(files, pace, boot_reads, paused):
    """(busy, stop): ``busy`` set while the others read the disk (watch_reads, until ``stop``); never with
    ``boot_reads`` 0 or for ``files`` that take less than SHORT_FETCH seconds at ``pace``."""
    busy, stop = threading.Event(), threading.Event()
    if pace and sum(size for _, size in files) < SHORT_FETCH * pace:
        boot_reads = 0      # a short fetch does not wait
    if boot_reads:      # busy until the first TICK has looked
        busy.set()
        threading.Thread(target=watch_reads, args=(busy, stop, paused, boot_reads), daemon=True).start()
    return busy, stop


def files_of(folder, errors):
    """(path, size) of every file under ``folder``: small ones first, then by name; a file that cannot be
    looked at goes to ``errors``."""
    found = []
    for here, dirs, names in os.walk(folder, onerror=lambda exc: errors.append(f"{exc.filename}: {exc.strerror}")):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for n in names:
            p = os.path.join(here, n)
            try:
                found.append((p, os.stat(p).st_size))
            except OSError as exc:
                errors.append(f"{p}: {exc.strerror or exc}")
    return sorted(found, key=lambda f: (f[1] > SMALL, f[0]))


def parts_of(files):
    """(path, offset, length) pieces of ``files``, in reading order."""
    out = []
    for path, size in files:
        step = max(MIN_PART, -(-size // PARTS_PER_FILE))
        out += [(path, off, min(step, size - off)) for off in range(0, size, step)] or [(path, 0, 0)]
    return out


def probes(off, length):
    """The offsets where a part is probed (PROBE bytes each): its first byte, then the last page of every
    STRIDE; each read returns once rclone's download of the part has got there."""
    end = off + length
    return [off] + [max(off, min(o + STRIDE, end) - PROBE) for o in range(off, end, STRIDE)]


def window_pace(files, pace, window):
    """``pace``, raised so that ``files`` take at most ``window`` seconds (0: no window; an unpaced fetch stays
    unpaced)."""
    total = sum(size for _, size in files)
    return max(pace, total / window) if pace and window else pace


def warm(folder, seconds=600.0, workers=WORKERS, pace=None, boot_reads=0, waited=None, window=0.0):
    """Warm every file under ``folder``; (files, bytes warmed, seconds, first error or ""). ``window``: see
    window_pace (the entrypoint's FETCH_WINDOW)."""
    errors = []
    files = files_of(folder, errors)
    return warm_files(files, seconds, workers, errors, window_pace(files, rate() if pace is None else pace, window),
                      boot_reads, waited)


def warm_files(files, seconds=600.0, workers=WORKERS, errors=None, pace=0.0, boot_reads=0, waited=None):
    """Probe ``files`` ((path, size) in reading order) in parts, ``workers`` at a time, at most ``pace``
    bytes a second (0: as fast as rclone goes), none while the other processes read more than
    ``boot_reads`` bytes a TICK from the disk (0: never wait; the entrypoint's warm-up, in vLLM's container,
    passes BOOT_READS; not when the files take less than SHORT_FETCH seconds at ``pace``; ``waited[0]``
    gets the seconds it waited); the bytes counted are the bytes rclone has fetched (each probe returns
    once the part's download got past it)."""
    start = time.monotonic()
    errors = [] if errors is None else errors
    todo = parts_of(files)
    lock, done = threading.Lock(), [0]
    paused, cut = [0.0] if waited is None else waited, [False]
    busy, stop = boot_watch(files, pace, boot_reads, paused)

    def worker():
        while True:
            with lock:
                if not todo or errors or time.monotonic() - start > seconds:
                    return
                path, off, length = todo.pop(0)
            try:
                fd = os.open(path, os.O_RDONLY)
                try:
                    if hasattr(os, "posix_fadvise"):      # no read-ahead: only the probes cross FUSE
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                    end, reached = off + length, off
                    for at in probes(off, length):
                        while busy.is_set() and time.monotonic() - start <= seconds:
                            time.sleep(TICK)
                        if pace:      # ahead of the pace: wait (rclone's download stops a window past the probe)
                            ahead = done[0] / pace - (time.monotonic() - start - paused[0])
                            if ahead > 0:
                                time.sleep(min(ahead, 1.0))
                        if time.monotonic() - start > seconds:
                            cut[0] = True
                            break
                        if not os.pread(fd, PROBE, at):
                            break
                        with lock:
                            done[0] += max(0, min(at + PROBE, end) - reached)
                        reached = max(reached, min(at + PROBE, end))
                finally:
                    os.close(fd)
            except OSError as exc:
                with lock:
                    errors.append(f"{path}: {exc.strerror or exc}")

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    took = time.monotonic() - start
    problem = errors[0] if errors else (f"not done within {seconds:g} s" if todo or cut[0] else "")
    return len(files), done[0], took, problem


def report(folder, result, waited=0.0):
    """The one line a warm-up leaves in the log."""
    n, read, took, problem = result
    gb = read / 1e9
    took_note = f" ({waited:.1f} s of them waiting while vLLM read the disk)" if waited else ""
    if problem:
        return (f"rustfs-vllm: warm-up of {folder} stopped after {took:.1f} s{took_note}, {gb:.2f} GB warmed: {problem} "
                "(best effort: vLLM reads the rest through the mount)")
    return (f"rustfs-vllm: warm-up of {folder}: {n} files, {gb:.2f} GB in {took:.1f} s{took_note} "
            f"({read / 1e6 / max(took, 0.001):.0f} MB/s)")


def main(argv):
    if not argv:
        print("usage: warm.py FOLDER [SECONDS]", file=sys.stderr)
        return 2
    folder = argv[0]
    seconds = float(argv[1]) if len(argv) > 1 else 600.0
    try:
        os.nice(10)          # vLLM's boot comes first; the warm-up mostly waits on rclone
    except OSError:
        pass
    try:
        waited = [0.0]
        result = warm(folder, seconds, min(WORKERS, cpus()), boot_reads=BOOT_READS, waited=waited,
                      window=FETCH_WINDOW)
        print(report(folder, result, waited[0]), file=sys.stderr, flush=True)
    except Exception as exc:   # noqa: BLE001 - best effort: one line, never a traceback
        print(f"rustfs-vllm: warm-up of {folder} failed: {exc} (best effort: vLLM reads through the mount)",
              file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
