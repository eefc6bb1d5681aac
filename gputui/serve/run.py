"""``gputui serve`` from start to stop: bind, sample, serve, and stop cleanly on a signal."""

from __future__ import annotations

import errno
import socket
import ssl
import sys
import threading
from collections.abc import Callable
from typing import TextIO

from gputui.exits import EXIT_INTERRUPTED, Stop, stop_on_signals
from gputui.serve.listen import ListenAddress, is_loopback
from gputui.serve.server import bound_address, make_app, open_server
from gputui.telemetry.polling import Poller, Samplers

WAKE_S = 0.5
"""How often the main thread looks up from waiting for a signal."""


class ServeError(Exception):
    """``gputui serve`` cannot start; the message is one line that says what to do."""


def serve(
    address: ListenAddress,
    *,
    interval_s: float,
    processes: bool,
    jobs: bool = False,
    raw_commands: bool = False,
    tls: ssl.SSLContext | None = None,
    samplers: Samplers | None = None,
    stop: Stop | None = None,
    announce: Callable[[str], None] | None = None,
    err: TextIO = sys.stderr,
) -> int:
    """Serve ``/metrics`` and ``/snapshot`` on ``address`` until SIGTERM, Ctrl+C or ``stop``
    (signals call it too, from the main thread); 0 after SIGTERM or ``stop``, 130 after
    Ctrl+C.

    Announces one line once listening (with the port the system chose, for port 0) through
    ``announce`` (default: standard output; what it raises, a full disk, stops serving and is
    raised again), and one warning line on ``err`` when the address is reachable from other
    machines. ``raw_commands`` serves the processes' command lines with their secrets (for
    the real samplers, built here unless ``samplers`` are given).

    Raises:
        ServeError: The address cannot be listened on.
    """
    stop = stop if stop is not None else Stop()
    if samplers is None:
        poller = Poller.real(interval_s, raw_commands=raw_commands, name="gputui-serve")
    else:
        poller = Poller(samplers, interval_s, name="gputui-serve")
    app = make_app(poller.latest, interval_s=interval_s, processes=processes, jobs=jobs)
    try:
        server = open_server(address, app, tls)
    except OSError as error:
        raise ServeError(_bind_failure(address, error)) from None
    host, port = bound_address(server)
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if not is_loopback(host):
        err.write(
            f"gputui serve: warning: {shown} is reachable from other machines, and anyone who "
            "can reach it can read this machine's GPUs"
            + (_processes_shown(raw_commands) if processes else "")
            + f"; listen on 127.0.0.1:{port} to keep it to this machine\n"
        )
        err.flush()
    restore = stop_on_signals(stop)
    serving = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": WAKE_S}, name="gputui-serve-http"
    )
    try:
        poller.start()
        serving.start()
        scheme = "https" if tls is not None else "http"
        (announce or _print)(
            f"gputui serve: {scheme}://{shown}/metrics and /snapshot, sampling every "
            f"{interval_s:g} s (Ctrl+C stops)"
        )
        while not stop.event.wait(WAKE_S):
            pass
    except KeyboardInterrupt:  # Ctrl+C before our handler was in place, or with none
        stop(EXIT_INTERRUPTED)
    finally:
        restore()
        if serving.is_alive():
            server.shutdown()  # no new scrape starts; those under way finish on their threads
        server.server_close()
        poller.close()  # then the samplers, NVML's shutdown last
    return stop.code


def _print(line: str) -> None:
    print(line, flush=True)


def _processes_shown(raw_commands: bool) -> str:
    """What the warning adds for ``--processes``."""
    if raw_commands:
        return " and the command lines of their processes, secrets included"
    return " and the command lines of their processes (secrets in them redacted)"


def _bind_failure(address: ListenAddress, error: OSError) -> str:
    """One line saying why ``address`` cannot be listened on, and what to do."""
    choose = "choose another with --listen HOST:PORT"
    if isinstance(error, socket.gaierror):
        return (
            f"cannot listen on {address}: the host {address.host!r} does not resolve "
            f"({error.strerror}); name an IP address of this machine, e.g. 127.0.0.1"
        )
    if error.errno == errno.EADDRINUSE:
        return f"cannot listen on {address}: another program uses that port; {choose}"
    if error.errno == errno.EADDRNOTAVAIL:
        return (
            f"cannot listen on {address}: {address.host} is not an address of this machine; "
            "use 127.0.0.1 for this machine only, or 0.0.0.0 for every interface"
        )
    if error.errno == errno.EACCES:
        return (
            f"cannot listen on {address}: ports below 1024 need root; "
            f"choose a port from 1024 up with --listen HOST:PORT"
        )
    reason = error.strerror or str(error)
    return f"cannot listen on {address} ({reason}); {choose}"
