"""The mount pods' image by digest (issue 45): the rclone DaemonSet's pods are root on their nodes (a
privileged container with the host's mounts), so they run ``rcloneImage`` by the digest its registry
holds now, never by a tag someone could move to other code.

The digest comes from the registry through this machine's Docker engine (``GET /distribution/<image>/json``:
the engine asks the registry with its own credentials and certificates, as ``docker push`` did, and pulls
nothing). Tried with the test cluster's registry (``10.232.0.1:5000/...``): the engine answered the
manifest's digest, the one the nodes' containerd resolves. A name the engine cannot resolve (no registry
reachable, e.g. ``rustfs-vllm/rclone-mount:1.75.2`` loaded into the nodes by hand) stays a tag, and preview
says so in one line; an ``rcloneImage`` given as ``repo@sha256:...`` is used as it is (the policy pack
refuses a tag on production stacks).
"""
from __future__ import annotations

from typing import Callable

from components.mounting.keeper_tool import DockerError, api


def _ask(image: str) -> str:
    """The registry's digest of ``image`` (DockerError when the engine cannot tell)."""
    status, answer = api("GET", f"/distribution/{image}/json")
    digest = ((answer or {}).get("Descriptor") or {}).get("digest", "") if isinstance(answer, dict) else ""
    if status != 200 or not digest.startswith("sha256:"):
        message = answer.get("message", "") if isinstance(answer, dict) else str(answer)
        raise DockerError(f"{status} {message}".strip()[:200])
    return digest


def repository(image: str) -> str:
    """``image`` less its tag (a registry's port is not a tag)."""
    last = image.rsplit("/", 1)[-1]
    return image[:len(image) - len(last)] + last.split(":", 1)[0] if ":" in last else image


def pinned(image: str, ask: Callable[[str], str] = _ask) -> tuple[str, str]:
    """(what the mount pods run, "" or why it stays ``image``'s tag)."""
    if "@sha256:" in image:
        return image, ""
    try:
        return f"{repository(image)}@{ask(image)}", ""
    except DockerError as exc:
        return image, str(exc)


def line(image: str, ref: str, why: str) -> str:
    """Preview's line on what the mount pods run."""
    if not why:
        return f"mount pods run rcloneImage {image} as {ref}"
    return (f"mount pods run rcloneImage {image} by its tag: this machine's Docker engine got no digest of it from a "
            f"registry ({why}); pin it as rcloneImage <repository>@sha256:<digest> to run exactly that image "
            "(the policy pack refuses a tag on production stacks)")
