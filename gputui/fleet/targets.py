"""The hosts of a fleet as the user names them: ``--hosts H1:P1,H2:P2`` or ``--hostfile FILE``.

A host is ``HOST``, ``HOST:PORT``, ``[IPv6]:PORT`` or a whole ``http(s)://`` URL; without a
port it is ``gputui serve``'s default port, and without a path ``/metrics``.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from gputui.serve.listen import DEFAULT_PORT

DEFAULT_TIMEOUT_S = 2.0
"""How long one host may take to answer before it is marked down."""

MAX_HOSTS = 1024
"""The most hosts one view reads (each may hold a thread while its read lasts)."""

_HOST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")


class TargetError(ValueError):
    """A host the user named cannot be read as one; the message says what to write."""


@dataclass(frozen=True, slots=True)
class Target:
    """One host to read."""

    name: str
    """The host as the user wrote it (what every view shows)."""
    url: str
    """The exporter's metrics URL."""


def parse_hosts(text: str) -> tuple[Target, ...]:
    """Parse ``--hosts``: hosts separated by commas.

    Raises:
        TargetError: for an empty entry, a bad host or port, or a host named twice.
    """
    entries = [entry.strip() for entry in text.split(",")]
    if not any(entries):
        raise TargetError("no hosts given: write them as HOST:PORT,HOST:PORT")
    if "" in entries:
        raise TargetError(f"an empty host in {text!r}: write them as HOST:PORT,HOST:PORT")
    return _unique([parse_target(entry) for entry in entries])


def read_hostfile(path: str) -> tuple[Target, ...]:
    """Read ``--hostfile``: one host per line; ``#`` starts a comment, blank lines are skipped.

    Raises:
        TargetError: when the file cannot be read, names no host, or a line is not a host
            (the message names the line).
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or "not UTF-8 text"
        raise TargetError(f"cannot read the host file {path!r}: {reason}") from None
    targets = []
    for number, line in enumerate(lines, start=1):
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        try:
            targets.append(parse_target(entry))
        except TargetError as error:
            raise TargetError(f"{path} line {number}: {error}") from None
    if not targets:
        raise TargetError(f"the host file {path!r} names no host (one HOST:PORT per line)")
    return _unique(targets)


def parse_target(entry: str) -> Target:
    """One host: ``HOST``, ``HOST:PORT``, ``[IPv6]:PORT`` or an ``http(s)://`` URL.

    Raises:
        TargetError: when ``entry`` is none of these.
    """
    if "://" in entry:
        return Target(entry, _url(entry))
    host, port = _host_and_port(entry)
    shown = f"[{host}]" if ":" in host else host
    return Target(entry, f"http://{shown}:{port}/metrics")


def _url(entry: str) -> str:
    parts = urlsplit(entry)
    if parts.scheme not in ("http", "https"):
        raise TargetError(f"{entry!r}: only http:// and https:// URLs can be read")
    try:
        port = parts.port
    except ValueError:
        raise TargetError(f"{entry!r}: the port must be a number from 1 to 65535") from None
    if not parts.hostname or port == 0:
        raise TargetError(f"{entry!r} names no host: write http://HOST:PORT/metrics")
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme}://{parts.netloc}{path}{query}"


def _host_and_port(entry: str) -> tuple[str, int]:
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise TargetError(f"{entry!r}: write an IPv6 host as [ADDRESS]:PORT")
        port_text = rest[1:] if rest else None
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise TargetError(f"{entry!r}: {host!r} is not an IPv6 address") from None
    else:
        host, colon, port_text = entry.rpartition(":")
        if not colon:
            host, port_text = entry, None
        if ":" in host:
            raise TargetError(f"{entry!r}: write an IPv6 host in brackets, [ADDRESS]:PORT")
        if not _HOST_NAME.match(host) or not _fits_dns(host):
            shown = host if len(host) <= 60 else f"{host[:57]}..."
            raise TargetError(f"{shown!r} is not a host name or address")
    return host, _port(entry, port_text)


def _fits_dns(host: str) -> bool:
    """A name of at most 253 characters, each dot-separated label at most 63 (RFC 1035)."""
    return len(host) <= 253 and all(len(label) <= 63 for label in host.split("."))


def _port(entry: str, text: str | None) -> int:
    if text is None:
        return DEFAULT_PORT
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise TargetError(f"{entry!r}: the port must be a number from 1 to 65535")
    return int(text)


def _unique(targets: list[Target]) -> tuple[Target, ...]:
    seen: set[str] = set()
    for target in targets:
        if target.url in seen:
            raise TargetError(f"{target.name!r} is named twice")
        seen.add(target.url)
    if len(targets) > MAX_HOSTS:
        raise TargetError(f"{len(targets)} hosts named; gputui reads at most {MAX_HOSTS}")
    return tuple(targets)
