"""What a full S3 server disk looks like to a user: an upload that fails with a server-side error
(``InternalError`` from ``UploadPart``, as a full volume answered here) is explained with the free
space of the server's volume, where this machine can tell (a Docker volume of this machine's engine:
its folder's ``statvfs``), and with what the upload still needs."""
from __future__ import annotations

import os
import subprocess
from typing import Optional

# S3 error codes that a server out of space answers. Tried here on real RustFS 1.0.1 (a 40 MiB ext4
# volume): ServiceUnavailable for a PutObject larger than the free space, InternalError when the disk
# filled during a write; the rclone serve s3 stand-in: InternalError. MinIO's and others' names too.
SPACE_CODES = ("InternalError", "ServiceUnavailable", "XMinioStorageFull", "StorageFull", "InsufficientStorage",
               "EntityTooLarge", "507", "503")


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def volume_free(volume: str) -> Optional[tuple[int, int]]:
    """(free, total) bytes of the filesystem holding Docker volume ``volume`` on this machine."""
    try:
        out = subprocess.run(["docker", "volume", "inspect", "-f", "{{.Mountpoint}}", volume],
                             capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = out.stdout.strip()
    if out.returncode != 0 or not path:
        return None
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def hint(store: str, needed: int) -> str:
    """The likely cause and what to do; ``store`` is the upload's (``<kind> volume <name>`` or
    ``external <endpoint>``), ``needed`` the bytes the upload still had to send."""
    where = "the server's disk"
    figure = ""
    if " volume " in store:
        volume = store.split(" volume ", 1)[1]
        where = f"the server's volume {volume} (rustfsVolume)"
        space = volume_free(volume)
        if space:
            figure = f": {_gib(space[0])} free of {_gib(space[1])}"
    return (f"the likely cause is that the S3 server is out of space on {where}{figure}, and this upload "
            f"still needed {_gib(needed)}; free space there or give the server a bigger disk, then run "
            "`pulumi up` again (the files already uploaded are kept)")
