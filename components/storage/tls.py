"""TLS toward the S3 endpoint: the CA bundle (``rustfsCaBundle``) and the preview-time probe.

A production RustFS behind HTTPS usually has a certificate from the company's own CA, which no
client on the host trusts by default. Every part that talks to the endpoint is given the same
bundle: boto3 (``verify=``), rclone (``--ca-cert``). The probe below runs at preview, so a missing
or wrong CA fails before anything is created, in one line naming the endpoint, the certificate
problem and the key to set.
"""
from __future__ import annotations

import hashlib
import socket
import ssl
from typing import Optional
from urllib.parse import urlsplit

KEY = "rustfs-vllm:rustfsCaBundle"
ENDPOINT_KEY = "rustfs-vllm:rustfsEndpoint"
PROBE_TIMEOUT_S = 5.0


def bundle_problem(path: str) -> Optional[str]:
    """Why ``path`` is not a usable PEM CA bundle, or None."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(16 * 2**20)
    except FileNotFoundError:
        return "the path of a PEM file of CA certificates (it does not exist)"
    except OSError as exc:
        return f"a readable PEM file of CA certificates ({exc.strerror})"
    if b"-----BEGIN CERTIFICATE-----" not in data:
        return "a PEM file of CA certificates (no '-----BEGIN CERTIFICATE-----' block in it)"
    try:
        ssl.create_default_context(cafile=path)
    except (ssl.SSLError, ValueError) as exc:
        return f"a PEM file of CA certificates that OpenSSL can load ({exc})"
    return None


def fingerprint(path: str) -> str:
    """A short digest of the bundle's content: a new CA in the same file re-mounts."""
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()[:16]


def probe(endpoint: str, ca_bundle: str = "") -> Optional[str]:
    """The certificate problem of an https ``endpoint``, as a one-line message naming the key to
    set; None when the handshake verifies, or when nothing answers (not up yet, or down: the
    credential check at `up` reports that)."""
    parts = urlsplit(endpoint)
    if parts.scheme != "https" or not parts.hostname:
        return None
    host, port = parts.hostname, parts.port or 443
    context = ssl.create_default_context(cafile=ca_bundle or None)
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as sock:
            with context.wrap_socket(sock, server_hostname=host):
                return None
    except ssl.SSLCertVerificationError as exc:
        reason = exc.verify_message or str(exc)
        if ca_bundle:
            return (f"{KEY} = {ca_bundle!r} is invalid: the CA certificates in it do not verify the certificate of "
                    f"{endpoint} ({reason}); set it to the CA that signed the server's certificate")
        return (f"{ENDPOINT_KEY} = {endpoint!r}: the server's certificate is not trusted by this host ({reason}); "
                f"set {KEY} to the PEM file of the CA that signed it")
    except ssl.SSLError as exc:
        return (f"{ENDPOINT_KEY} = {endpoint!r}: the TLS handshake failed ({exc.reason or exc}); "
                f"is the server speaking HTTPS on that port?")
    except OSError:
        return None
