"""Runs the real pulumi CLI (built by scripts/bootstrap) for a test stack, and reads its state."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from tests import leftovers
from tests.helpers import free_ports, pulumi_env


# (command, everything it printed) of every pulumi command run in this test process: the reliability
# suite's last test scans it for Python tracebacks (none may reach a user)
TRANSCRIPT: list[tuple[str, str]] = []


def _why(proc: subprocess.CompletedProcess) -> str:
    """What a failed pulumi command said: its error diagnostics first when it printed JSON (a
    ``preview --json``'s steps would otherwise push them out of the message), then stderr, then the end of
    stdout."""
    said: list[str] = []
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        said = [f"{d.get('severity', '?')}: {d.get('urn', '')} {d.get('message', '').strip()}"
                for d in doc.get("diagnostics", []) if d.get("severity") in ("error", "warning")]
    return "\n".join([*said, proc.stderr[-3000:], proc.stdout[-(3000 if said else 6000):]])


class Stack:
    def __init__(self, workdir: Path, name: str) -> None:
        self.workdir = workdir
        self.name = name
        self.env = pulumi_env()
        self.timings: dict[str, float] = {}

    def run(self, *args: str, check: bool = True, stdin: str | None = None, timeout: int = 1500,
            label: str | None = None, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
        started = time.monotonic()
        args_l = list(args)
        at = args_l.index("--") if "--" in args_l else len(args_l)
        cmd = [*prefix, "pulumi", *args_l[:at], "--stack", self.name, "--non-interactive", *args_l[at:]]
        proc = subprocess.run(cmd, cwd=self.workdir,
                              env=self.env, input=stdin, capture_output=True, text=True, timeout=timeout)
        TRANSCRIPT.append((" ".join(cmd), proc.stdout + proc.stderr))
        if label:
            self.timings[label] = round(time.monotonic() - started, 2)
        if check and proc.returncode != 0:
            raise AssertionError(f"pulumi {' '.join(args)} failed ({proc.returncode}):\n{_why(proc)}")
        return proc

    def init(self) -> None:
        leftovers.record(self.name)     # struck off by remove(); a killed run's stack is the next run's to clean
        subprocess.run(["pulumi", "stack", "init", self.name, "--non-interactive"], cwd=self.workdir, env=self.env,
                       capture_output=True, text=True, check=True)

    def set(self, key: str, value: str, secret: bool = False, path: bool = False) -> None:
        if key == "namePrefix":
            leftovers.record(self.name, value)
        args = ["config", "set", key]
        if path:
            args.append("--path")
        if secret:
            args.append("--secret")  # value from stdin: never on a command line
            self.run(*args, stdin=value)
        else:
            self.run(*args, "--", value)

    def write_config(self, config: dict, raw_text: str | None = None, keep_secrets: bool = False,
                     router_port: bool = True) -> None:
        """Replace the stack's config file (keeping its encryption salt): plain keys only, and with
        ``keep_secrets`` the secrets set before (``pulumi config set --secret``) that ``config`` leaves out."""
        import yaml

        path = self.workdir / f"Pulumi.{self.name}.yaml"
        if isinstance(config.get("namePrefix"), str):
            leftovers.record(self.name, config["namePrefix"])
        kept: dict = {}
        try:
            old = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
            salt = old.get("encryptionsalt")
            if keep_secrets:
                kept = {k: v for k, v in (old.get("config") or {}).items() if isinstance(v, dict) and "secure" in v}
        except yaml.YAMLError:
            salt = None
        salt = salt or getattr(self, "_salt", None)
        self._salt = salt
        if raw_text is not None:
            path.write_text(raw_text)
            return
        if router_port and "routerPort" not in config and config.get("target") != "kubernetes":
            # the stack's one endpoint on ports of its own (a stack left up elsewhere keeps 8080), the same
            # for every write of this stack's config
            self._router_port = getattr(self, "_router_port", None) or free_ports(3)
            config = {**config, "routerPort": self._router_port}
        data = {"config": {**kept, **{f"rustfs-vllm:{k}": v for k, v in config.items()}}}
        if salt:
            data["encryptionsalt"] = salt
        path.write_text(yaml.safe_dump(data, sort_keys=False))

    def outputs(self) -> dict:
        return json.loads(self.run("stack", "output", "--json").stdout)

    def state(self) -> dict:
        """The stack's deployment as exported by the CLI (secrets stay encrypted)."""
        return json.loads(self.run("stack", "export").stdout)

    def resource_outputs(self, type_suffix: str) -> list[dict]:
        return [r.get("outputs", {}) for r in self.state()["deployment"].get("resources", [])
                if r["type"].endswith(type_suffix)]

    def teardown(self, volume: str) -> None:
        """Destroy, remove the stack, and remove what a failed test may have left of it on the
        machine: its labelled containers and its data volume (which destroy keeps on purpose)."""
        self.run("destroy", "--yes", "--skip-preview", check=False)
        self.remove()
        leftovers.remove_docker(self.name, (volume,))

    def remove(self) -> None:
        self.run("stack", "rm", "--yes", "--force", check=False)
        cfg = self.workdir / f"Pulumi.{self.name}.yaml"
        if cfg.exists():
            os.remove(cfg)
        remove_logs(self.name)
        leftovers.forget(self.name)


def remove_logs(stack: str) -> None:
    """The stack's rclone logs on this machine (root's /var/log/rustfs-vllm/<namePrefix>/, which destroy
    keeps, as a service's logs are kept), and their folders when nothing else is in them."""
    from components.mounting.keeper_tool import LOGS_HOME

    for log in Path(LOGS_HOME).glob(f"*/rclone-{stack}-*"):
        log.unlink(missing_ok=True)
    for folder in Path(LOGS_HOME).glob("*"):
        try:
            folder.rmdir()
        except OSError:
            pass
