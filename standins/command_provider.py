"""OFFLINE STAND-IN for the pulumi-command 1.2.1 provider plugin: `command:local:Command` and
`command:remote:Command`.

Not the real plugin (that one is Go, built from github.com/pulumi/pulumi-command, and cannot be
downloaded on machines without GitHub). This one follows the real provider's behaviour as read
from its v1.2.1 source (provider/pkg/provider/local):

- inputs `create`, `update`, `delete`, `environment`, `triggers`, `dir`, `interpreter`, `stdin`,
  `logging`, `addPreviousOutputInEnv`; outputs `stdout`, `stderr` (trailing newline trimmed);
- a change of `triggers` replaces (create of the new one first, unless the program asks for
  delete-before-replace); any other input change runs `update`, or `create` when there is no
  `update`; `delete` runs the delete command stored in the state; nothing runs during preview;
- commands run with `/bin/sh -c` (or `interpreter`) in the provider's own environment plus
  `environment`, and `PULUMI_COMMAND_STDOUT`/`_STDERR` of the previous run;
- output lines are streamed to `pulumi up`'s display while the command runs (`logging`);
- a failed command fails with `exit status N: running "<command>":` and its output;
- refresh leaves the resource as it is (the real provider has no read);
- every output is secret when any input is (the real provider's outputs depend on all inputs).

`assetPaths`/`archivePaths` are not implemented: a check failure says so.

`command:remote:Command` (provider/pkg/provider/remote in v1.2.1) runs the same way on a host
reached over SSH, here through OpenSSH's `ssh` client (the real plugin speaks SSH itself, in Go):
- `connection`: `host`, `port` (22), `user` (root), `privateKey` (secret; written to a 0600 file
  for the one `ssh` call and removed after), `hostKey` (checked when given, ignored otherwise, as
  the real plugin does), `dialErrorLimit` (10) and `perDialTimeout` (15 s): a connection that fails
  is tried again up to the limit, then fails with `after N failed attempts: <ssh's error>`;
  `password`, `privateKeyPassword`, `agentSocketPath` and `proxy` are not implemented (check says so);
- `stdin` reaches the remote command's standard input (the way to give it secrets: not argv);
- `environment` is not implemented: the real plugin sends it with SSH `Setenv`, which sshd refuses
  unless its AcceptEnv lists every name, so this program never uses it (check says so);
- a failed command fails with `Process exited with status N: running "<command>":` and its output.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from typing import Any

from standins.plugin import Context, DiffResult, ProviderError, Resource, canonical, serve

VERSION = "1.2.1"
INPUTS = ("addPreviousOutputInEnv", "create", "delete", "dir", "environment", "interpreter", "logging",
          "stdin", "triggers", "update")
LOGGING = ("stdout", "stderr", "stdoutAndStderr", "none")


def _stream(ctx: Context, argv: list[str], env: dict[str, str] | None, cwd: str | None, stdin: str,
            logging: str) -> tuple[int, str, str, str]:
    """Run ``argv``, showing its lines in `pulumi up` as they come: (exit code, stdout, stderr, both)."""
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    out: list[str] = []
    err: list[str] = []
    both: list[str] = []
    lock = threading.Lock()

    def pump(stream: Any, sink: list[str], show: bool) -> None:
        for line in stream:
            with lock:
                sink.append(line)
                both.append(line)
            if show:
                ctx.log(line.rstrip("\n"))

    threads = [threading.Thread(target=pump, args=(proc.stdout, out, logging in ("stdout", "stdoutAndStderr"))),
               threading.Thread(target=pump, args=(proc.stderr, err, logging in ("stderr", "stdoutAndStderr")))]
    for t in threads:
        t.start()
    if stdin:
        try:
            proc.stdin.write(stdin)
            proc.stdin.close()
        except BrokenPipeError:
            pass
    code = proc.wait()
    for t in threads:
        t.join()
    return code, "".join(out), "".join(err), "".join(both)


def _outputs(code: int, failure: str, command: str, out: str, err: str, both: str) -> tuple[str, str]:
    """(stdout, stderr) with the trailing newline trimmed, or the real plugin's failure message:
    ``<failure>: running "<command>":`` and the output (``failure`` is Go's error text, which the
    local and the remote command word differently)."""
    if code != 0:
        raise ProviderError(f"{failure}: running {command!r}:\n{both}")
    return out.removesuffix("\n"), err.removesuffix("\n")


def run(ctx: Context, command: str, inputs: dict[str, Any], previous: dict[str, Any]) -> tuple[str, str]:
    argv = list(inputs.get("interpreter") or ["/bin/sh", "-c"]) + [command]
    env = dict(os.environ)
    env.update({k: str(v) for k, v in (inputs.get("environment") or {}).items()})
    if inputs.get("addPreviousOutputInEnv", True) is not False:
        if previous.get("stdout"):
            env["PULUMI_COMMAND_STDOUT"] = previous["stdout"]
        if previous.get("stderr"):
            env["PULUMI_COMMAND_STDERR"] = previous["stderr"]
    code, out, err, both = _stream(ctx, argv, env, inputs.get("dir") or os.getcwd(), inputs.get("stdin") or "",
                                   inputs.get("logging") or "stdoutAndStderr")
    return _outputs(code, f"exit status {code}", command, out, err, both)


class LocalCommand(Resource):
    token = "command:local:Command"
    inputs = INPUTS

    def execute(self, ctx: Context, command: str, inputs: dict[str, Any], previous: dict[str, Any]) -> tuple[str, str]:
        return run(ctx, command, inputs, previous)

    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        failures = []
        for key in news:
            if key in ("assetPaths", "archivePaths"):
                failures.append((key, f"{key} is not implemented by the offline stand-in for pulumi-command; "
                                      "install the real plugin"))
            elif key not in INPUTS:
                failures.append((key, f"unknown property {key!r} of command:local:Command"))
        if news.get("logging") not in (None, *LOGGING):
            failures.append(("logging", f"logging {news['logging']!r}: one of {', '.join(LOGGING)}"))
        return news, failures

    def diff(self, id_: str, olds: dict[str, Any], old_inputs: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        keys = sorted(k for k in set(old_inputs) | set(news) if k in self.inputs)
        changed = [k for k in keys if canonical(old_inputs.get(k)) != canonical(news.get(k))]
        return DiffResult(updates=[k for k in changed if k != "triggers"],
                          replaces=[k for k in changed if k == "triggers"])

    def create(self, ctx: Context, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        id_ = ctx.urn.split("::")[-1] + os.urandom(4).hex()
        state = {**inputs, "stdout": "", "stderr": ""}
        if ctx.preview or not inputs.get("create"):
            return id_, state
        state["stdout"], state["stderr"] = self.execute(ctx, inputs["create"], inputs, {})
        return id_, state

    def update(self, ctx: Context, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> dict[str, Any]:
        state = {**news, "stdout": olds.get("stdout", ""), "stderr": olds.get("stderr", "")}
        command = news.get("update") or news.get("create")
        if ctx.preview or not command:
            return state
        state["stdout"], state["stderr"] = self.execute(ctx, command, news, olds)
        return state

    def delete(self, ctx: Context, id_: str, state: dict[str, Any]) -> None:
        if state.get("delete"):
            self.execute(ctx, state["delete"], state, state)

    def output_secrets(self, outputs: dict[str, Any], input_secrets: set[str]) -> set[str]:
        return set(outputs) if input_secrets else set()


REMOTE_INPUTS = ("addPreviousOutputInEnv", "connection", "create", "delete", "environment", "logging", "stdin",
                 "triggers", "update")
CONNECTION_KEYS = ("host", "port", "user", "privateKey", "hostKey", "dialErrorLimit", "perDialTimeout")
SSH_DIAL_ERRORS = ("Connection refused", "Connection timed out", "No route to host", "Could not resolve",
                   "Connection closed by", "Connection reset", "kex_exchange_identification", "timed out")


def _ssh_argv(conn: dict[str, Any], key_file: str, known_hosts: str) -> list[str]:
    port = int(conn.get("port") or 22)
    argv = ["ssh", "-T", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={int(conn.get('perDialTimeout') or 15)}",
            "-o", "LogLevel=ERROR", "-p", str(port), "-l", conn.get("user") or "root"]
    if key_file:
        argv += ["-o", "IdentitiesOnly=yes", "-i", key_file]
    if known_hosts:
        argv += ["-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known_hosts}"]
    else:  # the real plugin ignores the host key when none is given
        argv += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    return argv + ["--", conn["host"]]


def run_remote(ctx: Context, command: str, inputs: dict[str, Any]) -> tuple[str, str]:
    conn = inputs["connection"]
    limit = int(conn.get("dialErrorLimit") if conn.get("dialErrorLimit") is not None else 10)
    with tempfile.TemporaryDirectory(prefix="rv-ssh-") as tmp:
        key_file = known_hosts = ""
        if conn.get("privateKey"):
            key_file = os.path.join(tmp, "key")
            fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(conn["privateKey"].rstrip("\n") + "\n")
        if conn.get("hostKey"):
            known_hosts = os.path.join(tmp, "known_hosts")
            port = int(conn.get("port") or 22)
            name = conn["host"] if port == 22 else f"[{conn['host']}]:{port}"
            with open(known_hosts, "w") as f:
                f.write(f"{name} {conn['hostKey'].strip()}\n")
        argv = _ssh_argv(conn, key_file, known_hosts) + [command]
        tries, delay = 0, 0.5
        while True:
            tries += 1
            code, out, err, both = _stream(ctx, argv, None, None, inputs.get("stdin") or "",
                                           inputs.get("logging") or "stdoutAndStderr")
            dial_failed = code == 255 and any(e in err for e in SSH_DIAL_ERRORS) and not out
            if not dial_failed:
                break
            if limit != -1 and tries >= limit:
                raise ProviderError(f"after {tries - 1} failed attempts: dial tcp {conn['host']}:"
                                    f"{int(conn.get('port') or 22)}: {err.strip()}")
            ctx.log(f"Dial {tries}/{'inf' if limit == -1 else limit} failed: retrying")
            time.sleep(delay)
            delay = min(delay * 1.5, 5.0)
    return _outputs(code, f"Process exited with status {code}", command, out, err, both)


class RemoteCommand(LocalCommand):
    """Like LocalCommand (diff, replace on triggers, create/update/delete), run over SSH."""
    token = "command:remote:Command"
    inputs = REMOTE_INPUTS

    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        failures = []
        for key in news:
            if key == "environment" and news[key]:
                failures.append((key, "environment is not implemented by the offline stand-in for pulumi-command "
                                      "(the real plugin sends it with SSH Setenv, which sshd refuses without "
                                      "AcceptEnv); pass values on stdin or prefix the command"))
            elif key not in REMOTE_INPUTS:
                failures.append((key, f"unknown property {key!r} of command:remote:Command"))
        conn = news.get("connection")
        if not isinstance(conn, dict) or not conn.get("host"):
            failures.append(("connection", "connection.host is required"))
        else:
            for key in conn:
                if key not in CONNECTION_KEYS and conn[key] not in (None, ""):
                    failures.append((f"connection.{key}", f"connection.{key} is not implemented by the offline "
                                                          f"stand-in for pulumi-command (implemented: "
                                                          f"{', '.join(CONNECTION_KEYS)})"))
        if news.get("logging") not in (None, *LOGGING):
            failures.append(("logging", f"logging {news['logging']!r}: one of {', '.join(LOGGING)}"))
        return news, failures

    def execute(self, ctx: Context, command: str, inputs: dict[str, Any], previous: dict[str, Any]) -> tuple[str, str]:
        return run_remote(ctx, command, inputs)


def main() -> None:
    serve("command", VERSION, [LocalCommand(), RemoteCommand()])


if __name__ == "__main__":
    main()
