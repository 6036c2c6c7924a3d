"""Weights streamed from the bucket: vLLM's Run:ai Model Streamer loader (``loadFormat: runai_streamer``).

vLLM is given ``--model s3://<bucket>/<prefix>/ --load-format runai_streamer``: it lists the prefix and
pulls the small files (config, tokenizer) with boto3, then streams every safetensors file into memory
with concurrent ranged GETs (the streamer's C++ S3 client). No mount is read. What the container gets:

- the keys as an AWS shared-credentials file uploaded into it (a Pulumi secret, mode 0444, like the
  API key), named by ``AWS_SHARED_CREDENTIALS_FILE``: both boto3 and the streamer's C++ client read
  the default credential chain, so no key is on argv or in the environment ``docker inspect`` shows;
- the endpoint (``AWS_ENDPOINT_URL``), path-style addressing (``RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING=0``:
  RustFS serves ``/<bucket>/<key>``, not ``<bucket>.<host>``), no instance metadata
  (``AWS_EC2_METADATA_DISABLED``: there is no EC2 here to ask), and a CA file for an https endpoint
  (``AWS_CA_BUNDLE``, read by both clients);
- host networking: the endpoint is the host's (the one its mounts use, often loopback), and vLLM
  listens on the model's port itself (``--host``/``--port``), so nothing is published.
"""
from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_docker as docker

from components.serving import secret_files

LOAD_FORMAT = "runai_streamer"
CREDENTIALS_FILE = f"{secret_files.SECRETS_DIR}/aws-credentials"
CA_FILE = "/run/rustfs-vllm/s3-ca.pem"
# vLLM's working set for the streamer: checked in the image by preflight before anything is created.
MODULE = "runai_model_streamer_s3"


def model_url(bucket: str, prefix: str) -> str:
    """What vLLM is given as --model: the model's prefix in the bucket."""
    return f"s3://{bucket}/{prefix}/"


def argv(bind_address: str, port: int) -> list[str]:
    """The flags a streamed model adds: the loader, and the address vLLM listens on (host networking)."""
    return ["--load-format", LOAD_FORMAT, "--host", bind_address, "--port", str(port)]


# The streamer's S3 client gives each ranged GET 1,000 ms and retries none by default (its debug log says
# "S3 request timeout is set to 1000 ms", "object storage retry timeout 0 seconds"): on a busy host or
# server one slow 8 MiB read fails the whole load ("File access error"; seen on the test cluster when a
# streamed pod rolled beside a client polling another model). These give a read 30 s and retry failed
# reads for up to 120 s; both names tried with the streamer 0.17.1 in our image (its debug log shows them
# taken). A model's env sets its own.
TIMEOUTS = {"RUNAI_STREAMER_S3_REQUEST_TIMEOUT_MS": "30000", "RUNAI_STREAMER_S3_TIMEOUT": "120"}


def env(endpoint: str, has_ca: bool) -> dict[str, str]:
    """The container's environment for the streamer: where and how to reach the bucket, no key."""
    out = {"AWS_ENDPOINT_URL": endpoint, "AWS_SHARED_CREDENTIALS_FILE": CREDENTIALS_FILE,
           "AWS_EC2_METADATA_DISABLED": "true", "AWS_REGION": "us-east-1",
           "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0"}
    if has_ca:
        out["AWS_CA_BUNDLE"] = CA_FILE
    return out


def credentials(access_key: str, secret_key: str) -> str:
    """The shared-credentials file's text (its [default] profile)."""
    return f"[default]\naws_access_key_id = {access_key}\naws_secret_access_key = {secret_key}\n"


def uploads(access_key: pulumi.Input[str], secret_key: pulumi.Input[str],
            ca_bundle: str = "") -> pulumi.Output[list[docker.ContainerUploadArgs]]:
    """The files uploaded into the container before it starts: the keys (secret) and the CA (public)."""
    ca: Optional[str] = open(ca_bundle, encoding="utf-8").read() if ca_bundle else None

    def files(keys: list[str]) -> list[docker.ContainerUploadArgs]:
        out = [docker.ContainerUploadArgs(file=CREDENTIALS_FILE, content=credentials(keys[0], keys[1]),
                                          permissions="0444")]
        if ca is not None:
            out.append(docker.ContainerUploadArgs(file=CA_FILE, content=ca, permissions="0444"))
        return out
    return pulumi.Output.secret(pulumi.Output.all(access_key, secret_key).apply(files))
