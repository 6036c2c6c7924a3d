"""Where the stack's pods may run (kubeStoreNodeLabel, issue 45): RustFS on the nodes that carry the label,
the serving pods (vLLM and the mount DaemonSet) on the nodes that do not, so that the store and the models
never share a node's memory, CPU and disk. Unset: the scheduler places every pod as it likes (as before)."""
from __future__ import annotations

from typing import Optional

import pulumi_kubernetes as k8s


def split(label: str) -> tuple[str, str]:
    """``key=value`` as (key, value)."""
    key, _, value = label.partition("=")
    return key, value


def store_selector(label: str) -> Optional[dict[str, str]]:
    """RustFS's pod: only on the nodes with ``label`` (None: anywhere)."""
    return dict([split(label)]) if label else None


def serving_affinity(label: str) -> Optional[k8s.core.v1.AffinityArgs]:
    """A serving pod: never on a node with ``label`` (None: anywhere)."""
    if not label:
        return None
    key, value = split(label)
    return k8s.core.v1.AffinityArgs(node_affinity=k8s.core.v1.NodeAffinityArgs(
        required_during_scheduling_ignored_during_execution=k8s.core.v1.NodeSelectorArgs(node_selector_terms=[
            k8s.core.v1.NodeSelectorTermArgs(match_expressions=[
                k8s.core.v1.NodeSelectorRequirementArgs(key=key, operator="NotIn", values=[value])])])))
