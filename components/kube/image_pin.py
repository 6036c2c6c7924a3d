"""The mount pods' image by digest (issue 45): the rclone DaemonSet's pods are root on their nodes (a
privileged container with the host's mounts), so they run ``rcloneImage`` by the digest its registry
holds now, never by a tag someone could move to other code.

The digest comes from the registry through this machine's Docker engine (``GET /distribution/<image>/json``:
the engine asks the registry with its own credentials and certificates, as ``docker push`` did, and pulls
nothing). Tried with the test cluster's registry (``10.232.0.1:5000/...``): the engine answered the
manifest's digest, the one the nodes' containerd resolves. An ``rcloneImage`` given as ``repo@sha256:...``
is used as it is (the policy pack refuses a tag on production stacks).

Pinned means pinned (issue 57):

- the digest is recorded when first resolved (the stack's ``mount_image`` output) and kept by every later
  run for the same ``rcloneImage``: the registry is not asked again, so a tag moved since is not adopted
  and a registry that does not answer changes nothing. Another tag in the config resolves anew; so does a
  run with ``RUSTFS_VLLM_REPIN_IMAGES=1`` (the documented step to take the tag's current digest);
- a name with no registry host (``rustfs-vllm/rclone-mount:1.75.2``: a local build loaded into the nodes
  by hand, or a Docker Hub name) is never looked up: it stays a tag, and preview says so in one line.
"""
from __future__ import annotations

import os
from typing import Callable, Mapping, Optional

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


def registry_host(image: str) -> str:
    """The registry host ``image`` names ("" for a name without one: Docker Hub's, or a local build's)."""
    first, _, rest = image.partition("/")
    return first if rest and ("." in first or ":" in first or first == "localhost") else ""


def _recorded(image: str, recorded: Optional[Mapping[str, str]]) -> str:
    """The digest reference recorded for ``image`` by an earlier run ("" when none)."""
    ref = str((recorded or {}).get("ref") or "")
    return ref if (recorded or {}).get("image") == image and "@sha256:" in ref else ""


def pinned(image: str, ask: Callable[[str], str] = _ask, recorded: Optional[Mapping[str, str]] = None,
           repin: Optional[bool] = None) -> tuple[str, str]:
    """(what the mount pods run, "" or why it stays ``image``'s tag). ``recorded``: the last run's
    ``mount_image`` output ({"image", "ref"}), kept unless ``repin`` (RUSTFS_VLLM_REPIN_IMAGES=1)."""
    if "@sha256:" in image:
        return image, ""
    repin = os.environ.get("RUSTFS_VLLM_REPIN_IMAGES") == "1" if repin is None else repin
    kept = _recorded(image, recorded)
    if kept and not repin:
        return kept, ""
    if not registry_host(image):
        return image, "its name has no registry host (a local build, or a Docker Hub name), so no registry is asked"
    try:
        return f"{repository(image)}@{ask(image)}", ""
    except DockerError as exc:
        return (kept, "") if kept else (image, str(exc))


def record(image: str, ref: str) -> dict[str, str]:
    """The ``mount_image`` output: the configured image and what the pods run."""
    return {"image": image, "ref": ref}


def line(image: str, ref: str, why: str) -> str:
    """Preview's line on what the mount pods run."""
    if not why:
        return f"mount pods run rcloneImage {image} as {ref}"
    if not why.startswith("its name"):
        why = f"this machine's Docker engine got no digest of it from a registry ({why})"
    return (f"mount pods run rcloneImage {image} by its tag: {why}; pin it as rcloneImage <repository>@sha256:<digest> "
            "to run exactly that image (the policy pack refuses a tag on production stacks)")
