"""RustFS's admin API (MinIO-compatible) from this machine, with the root keys: the client, and its
errors as one line each (what failed, the server's answer, what to do).

The client is ``minio.MinioAdmin`` from PyPI's ``minio`` (MinIO's own Python SDK: it signs the admin
requests and encrypts the add-user payload as the server expects, which is what we would otherwise
write by hand). Tried on RustFS 1.0.1: add-canned-policy, add-user, set-user-or-group-policy,
user-info, remove-user, remove-canned-policy; a missing user or policy answers 404 NoSuchResource; a
policy still attached to a user refuses its removal (500); a malformed policy answers 400
InvalidRequest; keys without admin rights answer 403 AccessDenied. The rclone serve s3 stand-in,
which has no admin API, answers 404 NoSuchBucket (it takes ``/minio/...`` for a bucket).
"""
from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from components.errors import ProviderError

SHARED_HINT = "set rustfs-vllm:readKeys to shared (serving hosts then hold the root keys)"


# A RustFS that has just started answers 503 ("server context is not ready") for some seconds: a `pulumi up
# --refresh` right after a host restart met it (tests/reliability/test_host_restart.py). 503 is retried for
# about 30 s (0.5, 1, 2, then 4 s apart), on the admin API's GETs and PUTs (each idempotent here); the last
# answer, if still 503, is explained as any other.
NOT_READY_RETRIES = 10
NOT_READY_BACKOFF_MAX = 4.0


def admin_for(props: dict[str, Any]) -> Any:
    """An admin client of the endpoint, with the root keys; a server's answer is not retried (its body is
    the message) but a starting server's 503, and a refused connection is, briefly."""
    from minio import MinioAdmin
    from minio.credentials import StaticProvider
    from urllib3 import PoolManager, Retry, Timeout

    url = urlsplit(props["endpoint"])
    http = PoolManager(timeout=Timeout(connect=10, read=60), cert_reqs="CERT_REQUIRED",
                       ca_certs=props.get("ca_bundle") or _system_cas(),
                       retries=Retry(total=3 + NOT_READY_RETRIES, connect=3, read=0, status=NOT_READY_RETRIES,
                                     status_forcelist=[503], raise_on_status=False, backoff_factor=0.5,
                                     backoff_max=NOT_READY_BACKOFF_MAX))
    return MinioAdmin(endpoint=url.netloc, credentials=StaticProvider(props["access_key"], props["secret_key"]),
                      secure=url.scheme == "https", http_client=http)


def _system_cas() -> str:
    import certifi

    return certifi.where()


def _answer(exc: BaseException) -> tuple[str, str, str]:
    """(HTTP status, S3 error code, message) of an admin API error; ("", "", text) for anything else."""
    from minio.error import MinioAdminException

    if not isinstance(exc, MinioAdminException):
        return "", "", str(exc).split(" (Caused by")[0]
    body = str(getattr(exc, "_body", ""))
    code = _tag(body, "Code")
    return str(getattr(exc, "_code", "")), code, _tag(body, "Message") or body[:200]


def _tag(xml: str, tag: str) -> str:
    start, end = xml.find(f"<{tag}>"), xml.find(f"</{tag}>")
    return xml[start + len(tag) + 2:end].replace("&apos;", "'").replace("&quot;", '"') if 0 <= start < end else ""


def is_unreachable(exc: BaseException) -> bool:
    """No answer at all: a refused or timed-out connection (after the client's retries)."""
    from urllib3.exceptions import MaxRetryError, ResponseError

    if isinstance(exc, MaxRetryError):
        return not isinstance(exc.reason, ResponseError)
    return isinstance(exc, (ConnectionError, TimeoutError))


def is_refused(exc: BaseException) -> bool:
    """The keys are not (or no longer) taken, or have no admin rights."""
    return _answer(exc)[0] in ("401", "403")


def is_missing(exc: BaseException) -> bool:
    status, code, _ = _answer(exc)
    return status == "404" and code in ("NoSuchResource", "XMinioAdminNoSuchUser", "XMinioAdminNoSuchPolicy")


def explain(exc: BaseException, props: dict[str, Any], what: str) -> str:
    """One line: what failed, the server's answer, and what to do."""
    status, code, message = _answer(exc)
    where = f"read key: {what} at the S3 server {props['endpoint']}"
    if is_unreachable(exc):
        return f"{where} failed: the server does not answer ({message}); start it or check rustfsEndpoint"
    answer = f"{status} {code}: {message}".strip()
    if status in ("401", "403"):
        return (f"{where} was refused ({answer}): rustfsAccessKey/rustfsSecretKey have no admin rights there; "
                f"use the server's root keys, or {SHARED_HINT}")
    if status in ("400",) and what.startswith("add policy"):
        return f"{where} was refused ({answer}): the server rejects the read policy; {SHARED_HINT}"
    if status in ("400", "404", "405", "501") or not status:
        return (f"{where} failed ({answer or 'no answer'}): the server has no RustFS/MinIO admin API (IAM) "
                f"there; {SHARED_HINT}")
    return f"{where} failed ({answer}); see the server's log, then run pulumi up again, or {SHARED_HINT}"


def call(props: dict[str, Any], what: str, fn: Any) -> None:
    """``fn()`` as one step of the read key; a failure is a ProviderError of one line."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - classified by explain
        raise ProviderError(explain(exc, props, what)) from None
