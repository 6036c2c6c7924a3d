"""Names and labels of the objects this stack makes in its namespace."""
from __future__ import annotations

import re

import pulumi_kubernetes as k8s

PART_OF = "rustfs-vllm"


def dns_name(text: str) -> str:
    """``text`` as an RFC 1123 label part: lower-case, other characters as '-'."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", text.lower())).strip("-") or "x"


def labels(stack: str, component: str, model: str = "") -> dict[str, str]:
    """The selector labels of one workload (the same on its pods and its Service)."""
    out = {"app.kubernetes.io/part-of": PART_OF, "app.kubernetes.io/instance": dns_name(stack)[:63],
           "app.kubernetes.io/component": component}
    if model:
        out["rustfs-vllm/model"] = dns_name(model)[:63]
    return out


def meta(name: str | None, namespace: str | None, stack: str, component: str, model: str = "",
         annotations: dict[str, str] | None = None) -> k8s.meta.v1.ObjectMetaArgs:
    return k8s.meta.v1.ObjectMetaArgs(name=name, namespace=namespace, labels=labels(stack, component, model),
                                      annotations=annotations)
