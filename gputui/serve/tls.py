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
        context.load_cert_chain(certfile=cert_file, keyfile=key_file)
    except ssl.SSLError as error:
        reason = error.reason or str(error)
        raise TlsError(
            f"--tls-cert and --tls-key cannot be used together ({reason}): give a PEM "
            "certificate and the PEM private key it was made with"
        ) from None
    except OSError as error:
        raise TlsError(
            f"--tls-cert or --tls-key cannot be read ({error.strerror or error}): "
            "give readable PEM files"
        ) from None
    return context
