"""boto3 clients for RustFS (or any S3-compatible server), built per call."""
from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError

MISSING_CODES = ("404", "NoSuchBucket", "NoSuchKey", "NotFound")
AUTH_CODES = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403", "InvalidToken")


def client(endpoint: str, access_key: str, secret_key: str, max_pool: int = 32, retries: int = 3) -> Any:
    """An S3 client for a path-style, us-east-1 endpoint.

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
        "s3", endpoint_url=endpoint, aws_access_key_id=access_key, aws_secret_access_key=secret_key, config=cfg)


def error_code(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


def is_missing(exc: BaseException) -> bool:
    return error_code(exc) in MISSING_CODES


def explain(exc: BaseException, endpoint: str, what: str) -> str:
    """A message a user can act on, without any credential in it."""
    code = error_code(exc)
    if isinstance(exc, EndpointConnectionError) or "Could not connect" in str(exc):
        return (f"{what}: the S3 endpoint {endpoint} is unreachable ({exc.__class__.__name__}); "
                f"check rustfs-vllm:rustfsEndpoint and that the server is running")
    if code in AUTH_CODES:
        return (f"{what}: the S3 server at {endpoint} rejected the credentials ({code}); "
                f"check rustfs-vllm:rustfsAccessKey and rustfs-vllm:rustfsSecretKey")
    return f"{what}: {exc}"
