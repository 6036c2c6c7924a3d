"""Reads raw values against the schema, recording (not raising) every problem in the config's
form: ``rustfs-vllm:<key> = <value> is invalid: <what is allowed>``."""
from __future__ import annotations

import re
from typing import Any, Mapping

from components.config.schema import COMPUTED, NAMESPACE, REQUIRED, Key, key as key_of

_MISSING = object()


class Reader:
    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw
        self.problems: list[str] = []

    def bad(self, key: str, value: Any, allowed: str) -> None:
        self.problems.append(f"{NAMESPACE}:{key} = {value!r} is invalid: {allowed}")

    def value(self, name: str, default: Any = _MISSING) -> Any:
        """The stack key ``name``, typed and checked against its declaration. Pulumi hands plain
        keys over as strings, so "9000" and "true" count as an integer and a boolean. A bad value
        is recorded and the default returned (``default`` for a computed one)."""
        decl = key_of(name)
        fallback = decl.default if default is _MISSING else default
        if fallback is COMPUTED:
            raise ValueError(f"{name} has a computed default: pass it")
        value = self.raw.get(name)
        if value is None:
            return fallback
        return self._checked(decl, _coerced(decl.kind, value), name, fallback)

    def field(self, decl: Key, entry: Mapping[str, Any], where: str, default: Any = _MISSING) -> Any:
        """Field ``decl`` of a model or host entry (YAML values: no coercion from strings)."""
        fallback = decl.default if default is _MISSING else default
        if decl.name not in entry:
            if fallback is REQUIRED:
                self.bad(f"{where}.{decl.name}", None, decl.allowed)
                return None
            return fallback
        return self._checked(decl, entry[decl.name], f"{where}.{decl.name}", fallback)

    def _checked(self, decl: Key, value: Any, key: str, fallback: Any) -> Any:
        if not _is(decl.kind, value) or decl.rule_broken(value):
            self.bad(key, value, decl.allowed)
            return None if fallback is REQUIRED else fallback
        return float(value) if decl.kind is float else value


def _is(kind: type, value: Any) -> bool:
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def _coerced(kind: type, value: Any) -> Any:
    if kind is bool and isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if kind is int and isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value):
        return int(value)
    if kind is float and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value
