"""Warm-up of a mounted model (issue 36): read its files through the rclone mount, many parts of a file
at once, so that rclone fetches them into its VFS cache (ranged GETs in parallel, one per part) while
vLLM is still booting; vLLM's own reads then come from the host's disk. Best effort: an error or the
deadline stops it with one line on stderr, and it never fails anything.

Standard library only, Python 3.9+, no imports from the package: the vLLM container's entrypoint runs
this file's text with ``python3 -c`` (components.serving.vllm), and the mount tool imports it
(mount_tool.PARTS) to warm a new revision before the old container is replaced.

    python3 -c "$(cat warm.py)" FOLDER [SECONDS]

Order: the small files first (vLLM reads config and tokenizer at once), then the rest by name (the
order vLLM reads safetensors shards). Each file is cut into up to PARTS_PER_FILE parts of at least
MIN_PART bytes; WORKERS threads read the parts in that order, so the next file starts while the last
parts of one are still coming.
"""
import os
import sys
import threading
import time

WORKERS = 8
PARTS_PER_FILE = 8
MIN_PART = 16 << 20
BLOCK = 1 << 20
SMALL = 1 << 20


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


def warm(folder, seconds=600.0, workers=WORKERS):
    """Read every file under ``folder``; (files, bytes read, seconds, first error or "")."""
    errors = []
    return warm_files(files_of(folder, errors), seconds, workers, errors)


def warm_files(files, seconds=600.0, workers=WORKERS, errors=None):
    """Read ``files`` ((path, size) in reading order) in parts, ``workers`` at a time."""
    start = time.monotonic()
    errors = [] if errors is None else errors
    todo = parts_of(files)
    lock, done = threading.Lock(), [0]

    def worker():
        while True:
            with lock:
                if not todo or errors or time.monotonic() - start > seconds:
                    return
                path, off, length = todo.pop(0)
            try:
                fd = os.open(path, os.O_RDONLY)
                try:
                    end = off + length
                    while off < end and time.monotonic() - start <= seconds:
                        got = len(os.pread(fd, min(BLOCK, end - off), off))
                        if not got:
                            break
                        off += got
                        with lock:
                            done[0] += got
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
    took = time.monotonic() - start
    problem = errors[0] if errors else (f"not done within {seconds:g} s" if todo else "")
    return len(files), done[0], took, problem


def report(folder, result):
    """The one line a warm-up leaves in the log."""
    n, read, took, problem = result
    gb = read / 1e9
    if problem:
        return (f"rustfs-vllm: warm-up of {folder} stopped after {took:.1f} s, {gb:.2f} GB read: {problem} "
                "(best effort: vLLM reads the rest through the mount)")
    return f"rustfs-vllm: warm-up of {folder}: {n} files, {gb:.2f} GB in {took:.1f} s ({read / 1e6 / max(took, 0.001):.0f} MB/s)"


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
        print(report(folder, warm(folder, seconds)), file=sys.stderr, flush=True)
    except Exception as exc:   # noqa: BLE001 - best effort: one line, never a traceback
        print(f"rustfs-vllm: warm-up of {folder} failed: {exc} (best effort: vLLM reads through the mount)",
              file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
