"""NVML's errors in words, and every NVML call in flight in this process.

The return codes are nvml.h's (a stable ABI), so nothing here needs ``pynvml``.
"""

from __future__ import annotations

import threading

from gputui.telemetry.readings import DriverCall

INVALID_ARGUMENT = 2
NO_PERMISSION = 4
NOT_SUPPORTED = 3
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
LIB_RM_VERSION_MISMATCH = 18
RESET_REQUIRED = 16
UNKNOWN = 999

_LIBRARY_MISSING = (
    "No NVIDIA driver library (libnvidia-ml.so.1) was found; "
    "install the NVIDIA driver to monitor NVIDIA GPUs."
)
_INIT_ERRORS: dict[int, str] = {
    LIBRARY_NOT_FOUND: _LIBRARY_MISSING,
    DRIVER_NOT_LOADED: (
        "The NVIDIA driver is installed but its kernel module is not loaded; "
        "load it with `sudo modprobe nvidia` (or reboot) to monitor NVIDIA GPUs."
    ),
    NO_PERMISSION: (
        "gputui is not allowed to open the NVIDIA devices (/dev/nvidia*); "
        "add your user to the group that owns them, or ask an administrator."
    ),
    LIB_RM_VERSION_MISMATCH: (
        "The NVIDIA driver library and the loaded kernel module are different versions "
        "(usually after a driver update); reboot, or reload the nvidia kernel modules."
    ),
    FUNCTION_NOT_FOUND: (
        "The NVIDIA driver is too old for the nvidia-ml-py bindings; "
        "update the NVIDIA driver to monitor NVIDIA GPUs."
    ),
}

WEDGED = "the driver may be wedged; check `nvidia-smi` and `dmesg`"
"""What a call that does not return means, and where to look."""

_HANDLE_ERRORS: dict[int, tuple[str, str]] = {
    GPU_IS_LOST: (
        "The driver reports GpuIsLost: the GPU fell off the bus. Check `dmesg` for Xid errors, "
        "then reset it (`nvidia-smi -r -i INDEX`) or reboot.",
        "see `dmesg`, then `nvidia-smi -r -i INDEX` or reboot",
    ),
    NO_PERMISSION: (
        "gputui may not open this GPU (no permission on its /dev/nvidia device); "
        "ask an administrator, or check the device's group.",
        "no permission on /dev/nvidia*: ask an admin",
    ),
    RESET_REQUIRED: (
        "The driver says this GPU requires a reset: `nvidia-smi -r -i INDEX`, or reboot.",
        "needs a reset: `nvidia-smi -r -i INDEX` or reboot",
    ),
    UNKNOWN: (
        "NVML answers Unknown Error for this GPU (often a GPU in a bad state); check `dmesg` "
        "for Xid errors, then reset it (`nvidia-smi -r -i INDEX`) or reboot.",
        "Unknown Error: see `dmesg`, `nvidia-smi -r -i INDEX`",
    ),
}
"""The sentence for each handle error NVML gives, and its few words (a reading's ``error``
and ``error_brief``); GpuIsLost's is also that of a GPU that answered it to any query."""


class GpuLost(Exception):
    """A query answered GpuIsLost."""


class Stopped(Exception):
    """The sampler was stopped (or the process is ending): no more driver calls."""


def describe_handle_error(index: int, code: int | None, detail: str) -> tuple[str, str]:
    """Why GPU ``index``'s handle could not be had, and the fix: one sentence, and the same
    in a few words (a reading's ``error`` and ``error_brief``)."""
    sentence, brief = _HANDLE_ERRORS.get(code or 0) or (
        f"NVML cannot open this GPU ({detail}); run `nvidia-smi -i INDEX` to see what the "
        "driver reports, then reset it or reboot.",
        "cannot open it: run `nvidia-smi -i INDEX`",
    )
    return sentence.replace("INDEX", str(index)), brief.replace("INDEX", str(index))


def describe_nvml_error(code: int | None, detail: str) -> str:
    """One sentence saying why NVML cannot be used (the return ``code`` that stopped it, else
    the bindings' own wording, ``detail``) and what to do about it."""
    if code is not None and code in _INIT_ERRORS:
        return _INIT_ERRORS[code]
    return (
        f"NVML could not start ({detail}); run `nvidia-smi` to see what the NVIDIA driver reports."
    )


def describe_hung_call(call: DriverCall, now: float) -> str:
    """One sentence naming an NVML call that has not returned, and for how long, with what
    to check: ``nvmlInit has not returned for 12 s: the driver may be wedged; ...``."""
    where = "" if call.gpu_index is None else f" on GPU {call.gpu_index}"
    return f"{call.function}{where} has not returned for {_whole_seconds(call, now)} s: {WEDGED}."


def describe_hung_gpu(index: int, call: DriverCall | None, now: float) -> str:
    """Why GPU ``index`` was not read by a deadline: the call on it that hangs, or the one
    before it."""
    if call is None:
        return f"NVML had not finished reading this GPU by the deadline: {WEDGED}."
    if call.gpu_index == index:
        return describe_hung_call(call, now)
    where = "" if call.gpu_index is None else f" on GPU {call.gpu_index}"
    return (
        f"Not read: NVML had not returned from {call.function}{where} "
        f"after {_whole_seconds(call, now)} s; {WEDGED}."
    )


def replaced(err: UnicodeDecodeError) -> str:
    """The string whose decoding failed, decoded again with each byte that is not UTF-8
    replaced (U+FFFD, which every renderer shows as it is).

    The bindings (``nvidia-ml-py``) decode each string NVML answers with a strict
    ``bytes.decode()``, a product name, UUID, bus id or driver version alike, and the
    driver answers whatever bytes it holds (a board's name comes from its VBIOS): the error
    carries all of them. Every query that decodes a string answers that string alone (the
    bus id is read from its struct inside its call), so the string is the call's answer.
    """
    return bytes(err.object).decode("utf-8", errors="replace")


def _whole_seconds(call: DriverCall, now: float) -> int:
    return int(max(now - call.started_at, 0.0))


Pending = tuple[str, int | None, float]
"""A :class:`DriverCall` as every call records it: (function, GPU index, started at); the
dataclass is made only when asked for, so that recording costs each call little."""


class _CallsInFlight:
    """Every thread's NVML call that has not returned yet, process-wide, and whether a new
    one may start.

    NVML's state is the process's: ``nvmlShutdown`` while another thread is inside a call,
    or the process's exit unloading the library under one, frees what that call uses, and
    a real driver crashes (see the stand-in's ``FAKE_NVML_CRASH_ON_TEARDOWN``).

    No lock, as every driver call passes here: a call is recorded before ``_ending`` is
    read, and :meth:`end` sets ``_ending`` before it reads the calls, so either ``end``
    sees the call or the call sees ``_ending`` (each dict operation is atomic in CPython).
    A call that must be alone (``nvmlShutdown``) is marked the same way before it counts
    the calls, and every other call looks for that mark once it is recorded: either the
    lone call sees the other, or the other sees the mark (both may give way).
    """

    def __init__(self) -> None:
        self._calls: dict[int, Pending] = {}
        self._ending = False
        self._alone: int | None = None  # the thread of the call that must be alone

    def enter(self, call: Pending, *, alone: bool = False) -> bool:
        """Record ``call`` as this thread's; False (not recorded: do not make it) once the
        process is ending, while a call that must be alone is in flight, or with ``alone``
        while another thread is inside NVML."""
        thread = threading.get_ident()
        self._calls[thread] = call
        if alone:
            self._alone = thread
        if self._ending or (len(self._calls) > 1 if alone else self._alone not in (None, thread)):
            if alone:
                self._alone = None
            del self._calls[thread]
            return False
        return True

    def leave(self) -> None:
        """This thread's call has returned."""
        thread = threading.get_ident()
        self._calls.pop(thread, None)
        if self._alone == thread:
            self._alone = None

    def end(self) -> tuple[DriverCall, ...]:
        """Let no call start from now on; returns the calls still in flight."""
        self._ending = True
        return self.now()

    def now(self) -> tuple[DriverCall, ...]:
        """The calls in flight."""
        return tuple(DriverCall(*call) for call in self._calls.copy().values())


IN_FLIGHT = _CallsInFlight()
"""The process's calls in flight: every NVML call enters it first and leaves it after."""


def calls_in_flight() -> tuple[DriverCall, ...]:
    """Every NVML call, in any thread of this process, that has not returned yet."""
    return IN_FLIGHT.now()


def end_nvml_calls() -> tuple[DriverCall, ...]:
    """No NVML call starts from now on (the process is about to end); returns the calls
    still in flight. While there is one, the process must end without unloading NVML
    under it: ``os._exit``, not the interpreter's exit (see ``gputui.commands``)."""
    return IN_FLIGHT.end()
