"""A real Docker registry on loopback for tests: Debian's `docker-registry` (distribution 2.8),
storing blobs in a temporary folder. Docker treats 127.0.0.0/8 registries as insecure-allowed, so
the daemon pulls from it over plain HTTP."""
from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

from tests.helpers import free_port


class Registry:
    def __init__(self, root: Path) -> None:
        binary = shutil.which("docker-registry")
        if not binary:
            raise RuntimeError("docker-registry is not installed (scripts/test installs Debian's docker-registry)")
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        root.mkdir(parents=True, exist_ok=True)
        config = root / "config.yml"
        config.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root / 'blobs'}\n"
                          f"  delete:\n    enabled: true\nhttp:\n  addr: {self.host}\n")
        self.log = open(root / "registry.log", "w")
        self.proc = subprocess.Popen([binary, "serve", str(config)], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://{self.host}/v2/", timeout=1)
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"docker-registry did not answer on {self.host}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.log.close()
