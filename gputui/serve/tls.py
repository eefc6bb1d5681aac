"""HTTPS for ``gputui serve``: a server context from a PEM certificate and its private key.

Built as prometheus_client's own ``start_http_server(certfile=..., keyfile=...)`` builds
it (``ssl.PROTOCOL_TLS_SERVER``, the chain loaded from the two files); its server offers
no basic auth, so neither does this.
"""

from __future__ import annotations

import ssl


class TlsError(ValueError):
    """The certificate or key cannot be used; the message says why, on one line."""


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A TLS server context serving ``cert_file`` (PEM, the chain) with ``key_file`` (PEM).

    Raises:
        TlsError: A file cannot be read, is not PEM, or the key does not match the certificate.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        # No password: an encrypted key fails here rather than waiting on a hidden prompt.
        context.load_cert_chain(certfile=cert_file, keyfile=key_file, password=b"")
    except ssl.SSLError as error:
        raise TlsError(_which_failed(cert_file, error)) from None
    except OSError as error:
        raise TlsError(
            f"--tls-cert or --tls-key cannot be read ({error.strerror or error}): "
            "give readable PEM files"
        ) from None
    return context


def _which_failed(cert_file: str, error: ssl.SSLError) -> str:
    """Why ``load_cert_chain`` refused the pair, naming the file at fault. OpenSSL says only
    "PEM lib" for either file, so the certificate is loaded alone to tell them apart."""
    if error.reason in {"KEY_VALUES_MISMATCH", "NO_CERTIFICATE_ASSIGNED"}:  # another key, type
        return (
            "the --tls-key does not match the --tls-cert: give the PEM private key the "
            "certificate was made with"
        )
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=cert_file)
    except ssl.SSLError:
        return "--tls-cert holds no PEM certificate that can be loaded: give a PEM certificate"
    return (
        "--tls-key holds no PEM private key that can be loaded: give the unencrypted PEM "
        "private key the certificate was made with"
    )
