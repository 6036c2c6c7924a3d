"""OFFLINE STAND-IN for the pulumi-command 1.2.1 provider plugin: `command:local:Command` only.

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
"""
from __future__ import annotations

import os
import subprocess
import threading
from typing import Any

from standins.plugin import Context, DiffResult, ProviderError, Resource, canonical, serve

VERSION = "1.2.1"
INPUTS = ("addPreviousOutputInEnv", "create", "delete", "dir", "environment", "interpreter", "logging",
          "stdin", "triggers", "update")
LOGGING = ("stdout", "stderr", "stdoutAndStderr", "none")


def run(ctx: Context, command: str, inputs: dict[str, Any], previous: dict[str, Any]) -> tuple[str, str]:
    argv = list(inputs.get("interpreter") or ["/bin/sh", "-c"]) + [command]
    env = dict(os.environ)
    env.update({k: str(v) for k, v in (inputs.get("environment") or {}).items()})
    if inputs.get("addPreviousOutputInEnv", True) is not False:
        if previous.get("stdout"):
            env["PULUMI_COMMAND_STDOUT"] = previous["stdout"]
        if previous.get("stderr"):
            env["PULUMI_COMMAND_STDERR"] = previous["stderr"]
    logging = inputs.get("logging") or "stdoutAndStderr"
    proc = subprocess.Popen(argv, env=env, cwd=inputs.get("dir") or os.getcwd(),
                            stdin=subprocess.PIPE if inputs.get("stdin") else subprocess.DEVNULL,
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
    if inputs.get("stdin"):
        proc.stdin.write(inputs["stdin"])
        proc.stdin.close()
    code = proc.wait()
    for t in threads:
        t.join()
    if code != 0:
        raise ProviderError(f"exit status {code}: running {command!r}:\n{''.join(both)}")
    return "".join(out).removesuffix("\n"), "".join(err).removesuffix("\n")


class LocalCommand(Resource):
    token = "command:local:Command"

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
        keys = sorted(k for k in set(old_inputs) | set(news) if k in INPUTS)
        changed = [k for k in keys if canonical(old_inputs.get(k)) != canonical(news.get(k))]
        return DiffResult(updates=[k for k in changed if k != "triggers"],
                          replaces=[k for k in changed if k == "triggers"])

    def create(self, ctx: Context, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        id_ = ctx.urn.split("::")[-1] + os.urandom(4).hex()
        state = {**inputs, "stdout": "", "stderr": ""}
        if ctx.preview or not inputs.get("create"):
            return id_, state
        state["stdout"], state["stderr"] = run(ctx, inputs["create"], inputs, {})
        return id_, state

    def update(self, ctx: Context, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> dict[str, Any]:
        state = {**news, "stdout": olds.get("stdout", ""), "stderr": olds.get("stderr", "")}
        command = news.get("update") or news.get("create")
        if ctx.preview or not command:
            return state
        state["stdout"], state["stderr"] = run(ctx, command, news, olds)
        return state

    def delete(self, ctx: Context, id_: str, state: dict[str, Any]) -> None:
        if state.get("delete"):
            run(ctx, state["delete"], state, state)

    def output_secrets(self, outputs: dict[str, Any], input_secrets: set[str]) -> set[str]:
        return set(outputs) if input_secrets else set()


def main() -> None:
    serve("command", VERSION, [LocalCommand()])


if __name__ == "__main__":
    main()
