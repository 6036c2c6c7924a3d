"""Reads the raw stack configuration from the Pulumi runtime, typed by the schema's declarations."""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config

from components.config.schema import KEYS, NAMESPACE

NAMES = tuple(k.name for k in KEYS)
SECRET_KEYS = tuple(k.name for k in KEYS if k.secret)


def read_raw() -> tuple[dict[str, Any], list[str]]:
    """({key: value}, problems): lists and maps parsed from YAML's JSON form; unknown keys and
    secrets set in plain text are problems, reported with the rest."""
    problems: list[str] = []
    raw: dict[str, Any] = {}
    for k in KEYS:
        full = f"{NAMESPACE}:{k.name}"
        value = runtime_config.get_config(full)
        if value is None or value == "":
            continue  # unset: Pulumi.yaml declares "" where our default is computed
        if k.secret and not runtime_config.is_config_secret(full):
            problems.append(f"{full} is set in plain text; allowed: a secret, set with "
                            f"`pulumi config set --secret {k.name} ...` so it is encrypted in Pulumi.<stack>.yaml")
        if k.kind in (list, dict) and isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                problems.append(f"{full} = {value!r} is invalid: a YAML list/map ({exc})")
                continue
        raw[k.name] = value
    for full in runtime_config.CONFIG.get():
        ns, _, name = full.partition(":")
        if ns == NAMESPACE and name not in NAMES:
            problems.append(f"{full} is not a known key; allowed: {', '.join(sorted(NAMES))}")
    return raw, problems


def stack_name() -> str:
    return pulumi.get_stack()


def stack_fqn() -> str:
    """This stack's fully qualified name, as owner records, registrations and a store's tenants name it."""
    # a local backend's stacks belong to "organization" (what the engine says where none is set)
    return f"{pulumi.get_organization() or 'organization'}/{pulumi.get_project()}/{pulumi.get_stack()}"


def stop_quietly_when_interrupted() -> None:
    """The upstream language host stops a program with SIGINT when the engine cancels its run (a
    resource failed, or Ctrl-C; pulumi-language-python's ``cmd.Cancel``). Python's default turns that
    into a KeyboardInterrupt traceback at whichever RPC the program was waiting on, printed into the
    user's output; the shim catches only ``Exception``. Here the program stops as a SIGINT'd process
    does (the same exit status as before), its output flushed, with nothing printed: the engine has
    already said why it stopped. Also where SIGINT came in ignored (a non-interactive shell's background
    job): the host's cancel is the engine's request, which the Go CLI above honours whatever it inherited,
    and an ignoring program would run on until the host kills it 5 s later."""
    if threading.current_thread() is not threading.main_thread():
        return      # signal handlers can be set only from the main thread

    def stop(_signum: int, _frame: object) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)

    signal.signal(signal.SIGINT, stop)
