"""boto3 clients for RustFS (or any S3-compatible server), built per call."""
from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError, SSLError

# the hints and the credential error codes are the mount tool's (its rclone preflight says the same)
from components.mounting.mount_tool import AUTH_CODES, AUTH_HINT, CA_HINT, ENDPOINT_HINT

MISSING_CODES = ("404", "NoSuchBucket", "NoSuchKey", "NotFound")


def client(endpoint: str, access_key: str, secret_key: str, max_pool: int = 32, retries: int = 3,
           ca_bundle: str = "") -> Any:
    """An S3 client for a path-style, us-east-1 endpoint; an https one verified against
    ``ca_bundle`` when given (rustfsCaBundle), else the system's CAs.

    Checksums only when required: recent boto3 sends CRC32 by default and older RustFS releases
    broke multipart uploads with them.
    """
    cfg = Config(
        region_name="us-east-1",
        s3={"addressing_style": "path"},
        signature_version="s3v4",
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        retries={"max_attempts": retries, "mode": "standard"},
        max_pool_connections=max_pool,
        connect_timeout=5,
        read_timeout=120,
    )
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint, aws_access_key_id=access_key, aws_secret_access_key=secret_key, config=cfg,
        verify=ca_bundle or None)


def client_for(props: dict[str, Any], **kwargs: Any) -> Any:
    """The client for a resource's inputs: endpoint, access_key, secret_key and optional ca_bundle."""
    return client(props["endpoint"], props["access_key"], props["secret_key"], ca_bundle=props.get("ca_bundle") or "",
                  **kwargs)


def list_probe(c: Any, probe: str) -> None:
    """One listing of ``probe`` (``bucket/prefix/``): how a tenant's key, which may neither list the buckets nor
    head the bucket (components/storage/tenant_policy.py), proves that its keys work and that the bucket is
    there; raises as the server answers."""
    bucket, prefix = probe.split("/", 1)
    c.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)


def error_code(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


def is_missing(exc: BaseException) -> bool:
    return error_code(exc) in MISSING_CODES


def is_unreachable(exc: BaseException) -> bool:
    """No S3 server answers at the endpoint (its container gone, the host down)."""
    return isinstance(exc, EndpointConnectionError) or "Could not connect" in str(exc)


def explain(exc: BaseException, endpoint: str, what: str) -> str:
    """A message a user can act on, without any credential in it."""
    code = error_code(exc)
    if isinstance(exc, SSLError) or "CERTIFICATE_VERIFY_FAILED" in str(exc):
        return f"{what}: the TLS certificate of {endpoint} was not verified ({_ssl_reason(exc)}); {CA_HINT} it"
    if isinstance(exc, EndpointConnectionError) or "Could not connect" in str(exc):
        return f"{what}: the S3 endpoint {endpoint} is unreachable ({exc.__class__.__name__}); {ENDPOINT_HINT}"
    if code in AUTH_CODES:
        return f"{what}: the S3 server at {endpoint} rejected the credentials ({code}); {AUTH_HINT}"
    return f"{what}: {exc}"


def _ssl_reason(exc: BaseException) -> str:
    text = str(exc)
    marker = "certificate verify failed: "
    if marker in text:
        return text[text.index(marker) + len(marker):].split(" (_ssl")[0].rstrip(")")
    return text[:200]
