"""``--listen HOST:PORT``: the address ``gputui serve`` binds, parsed and checked before binding."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

DEFAULT_PORT = 9922
"""gputui's port: clear of Prometheus (9090), node exporter (9100), dcgm-exporter (9400),
nvidia_gpu_exporter (9835) and nvitop-exporter (8000)."""

DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"
"""Loopback only, unless the user names another address."""

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*\.?")
"""A DNS host name (RFC 1123 labels), e.g. ``localhost`` or ``gpu-07.lab``."""

_SHOWN_MAX = 60
"""Longest value an error message shows whole."""
_EXAMPLE = f"e.g. --listen {DEFAULT_LISTEN}, or 0.0.0.0:{DEFAULT_PORT} for every interface"


class ListenError(ValueError):
    """A ``--listen`` value that cannot name an address; the message says what to write."""


@dataclass(frozen=True, slots=True)
class ListenAddress:
    """Where to listen."""

    host: str
    """An IPv4 or IPv6 address (without brackets) or a host name."""
    port: int
    """0 to 65535; 0 lets the system pick a free port."""

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_listen(text: str) -> ListenAddress:
    """Read ``HOST:PORT`` (an IPv6 host in brackets: ``[::1]:9922``; ``:9922`` is every
    IPv4 address, ``0.0.0.0:9922``).

    Raises:
        ListenError: The text is not such an address; the message shows one that is.
    """
    shown = repr(text if len(text) <= _SHOWN_MAX else f"{text[: _SHOWN_MAX - 3]}...")
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise ListenError(f"{shown} is not HOST:PORT ([IPv6]:PORT for IPv6), {_EXAMPLE}")
        port_text = rest[1:]
        if not _is_ip(host, 6):
            raise ListenError(f"{shown}: the host in brackets is not an IPv6 address, {_EXAMPLE}")
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon:
            raise ListenError(f"{shown} is not HOST:PORT, {_EXAMPLE}")
        if ":" in host:
            raise ListenError(
                f"{shown}: write an IPv6 address in brackets, e.g. --listen [::1]:{DEFAULT_PORT}"
            )
        host = host or "0.0.0.0"  # :PORT, as the Go exporters take it: every address
        numeric = all(part.isdigit() for part in host.rstrip(".").split("."))
        if not (_is_ip(host, 4) or (_HOST_NAME.fullmatch(host) and not numeric)):
            raise ListenError(f"{shown}: the host is not an IP address or host name, {_EXAMPLE}")
    if not (port_text.isascii() and port_text.isdigit()) or int(port_text) > 65535:
        raise ListenError(f"{shown}: the port must be a whole number from 0 to 65535, {_EXAMPLE}")
    return ListenAddress(host, int(port_text))


def is_loopback(address: str) -> bool:
    """Whether a bound IP address is reachable only from this machine."""
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _is_ip(text: str, version: int) -> bool:
    """Whether ``text`` is an IPv4 (``version`` 4) or IPv6 (6) address."""
    try:
        return ipaddress.ip_address(text).version == version
    except ValueError:
        return False
