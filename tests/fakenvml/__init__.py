"""Build and load the stand-in ``libnvidia-ml.so.1`` (``fake_nvml.c``).

Importable from outside pytest (benchmarks, screenshot scripts)::

    from tests.fakenvml import build_fake_nvml, load_fake_nvml

    lib_dir = build_fake_nvml(Path("/tmp/fake-nvml"))
    # In a child process: env["LD_LIBRARY_PATH"] = str(lib_dir)
    # In this process, through the real bindings:
    fake = load_fake_nvml(lib_dir)
    pynvml.nvmlInit()
    fake.calls("nvmlInitWithFlags")  # -> 1

The library is configured by ``FAKE_NVML_*`` environment variables, read at every
``nvmlInit``; README.md next to this file lists them.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("fake_nvml.c")
"""The C source of the stand-in library."""
LIBRARY_NAME = "libnvidia-ml.so.1"
"""The file name the NVML bindings look for."""

_CFLAGS = (
    "-std=c11",
    "-O2",
    "-Wall",
    "-Wextra",
    "-fPIC",
    "-shared",
    "-fvisibility=hidden",
    f"-Wl,-soname,{LIBRARY_NAME}",
    "-Wl,-Bsymbolic",
)


class CompilerNotFound(RuntimeError):
    """No C compiler is installed, so the stand-in library cannot be built."""


def find_c_compiler() -> str | None:
    """Return the C compiler to use: ``$CC``, else ``gcc``, else ``cc``; ``None`` if none."""
    for candidate in (os.environ.get("CC"), "gcc", "cc"):
        if candidate:
            found = shutil.which(candidate)
            if found:
                return found
    return None


def omittable_functions() -> frozenset[str]:
    """Return the NVML symbols ``build_fake_nvml(omit=...)`` can leave out."""
    return frozenset(re.findall(r"#ifndef FAKE_NVML_OMIT_(\w+)", SOURCE.read_text()))


def build_fake_nvml(out_dir: Path, omit: Sequence[str] = ()) -> Path:
    """Compile the stand-in library (once per source, flags and compiler) and return its folder.

    The build is cached under ``out_dir`` by a hash of the source and the flags, and
    written atomically, so concurrent callers and repeated calls are cheap and safe.

    Args:
        out_dir: Folder to build into (created if missing).
        omit: NVML symbols to leave out of the library entirely, so the bindings answer
            ``NVMLError_FunctionNotFound`` for them as on an old driver.

    Returns:
        The folder holding ``libnvidia-ml.so.1``: load it by path, or put it on a child
        process's ``LD_LIBRARY_PATH``.

    Raises:
        CompilerNotFound: There is no C compiler.
        ValueError: ``omit`` names a symbol the library does not export.
        RuntimeError: The compiler failed (its output is in the message).
    """
    unknown = sorted(set(omit) - omittable_functions())
    if unknown:
        raise ValueError(f"fake NVML does not export {', '.join(unknown)}; cannot omit them")
    compiler = find_c_compiler()
    if compiler is None:
        raise CompilerNotFound("no C compiler (gcc or cc) on PATH to build the stand-in NVML")

    flags = [*_CFLAGS, *(f"-DFAKE_NVML_OMIT_{name}" for name in sorted(set(omit)))]
    source = SOURCE.read_bytes()
    key = hashlib.sha256(b"\0".join([source, compiler.encode(), *map(str.encode, flags)]))
    target_dir = Path(out_dir) / f"fake-nvml-{key.hexdigest()[:16]}"
    target = target_dir / LIBRARY_NAME
    if target.exists():
        return target_dir

    target_dir.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=target_dir, prefix=".build-", suffix=".so")
    os.close(fd)
    try:
        result = subprocess.run(
            [compiler, *flags, "-o", partial, str(SOURCE)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"building the stand-in NVML failed:\n{result.stderr}")
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target_dir


@dataclass(frozen=True)
class FakeNvml:
    """The stand-in library loaded in this process, with its call counters."""

    lib: ctypes.CDLL
    """The loaded library (the same object ``pynvml.nvmlLib`` points at)."""
    path: Path
    """Path of the loaded ``libnvidia-ml.so.1``."""

    def calls(self, function: str, gpu: int | None = None) -> int:
        """Return how often ``function`` was called since the last ``nvmlInit``.

        Args:
            function: An NVML symbol, e.g. ``"nvmlDeviceGetFanSpeed"``.
            gpu: Count only calls on this GPU (``-1``: system-wide calls); all when ``None``.

        Raises:
            ValueError: The library does not know ``function`` (or ``gpu`` is out of range).
        """
        name = function.encode()
        if gpu is None:
            count = self.lib.fake_nvml_call_count(name)
        else:
            count = self.lib.fake_nvml_gpu_call_count(name, gpu)
        if count < 0:
            raise ValueError(f"fake NVML has no counter for {function!r} (gpu={gpu})")
        return int(count)

    def device_queries(self, gpu: int) -> int:
        """Return how many device queries GPU ``gpu`` answered (or refused) since init."""
        count = self.lib.fake_nvml_device_queries(gpu)
        if count < 0:
            raise ValueError(f"no GPU {gpu} in fake NVML")
        return int(count)

    def last_seen_timestamp(self, gpu: int) -> int:
        """Return the ``lastSeenTimeStamp`` (µs) GPU ``gpu``'s last process utilization call got."""
        stamp = self.lib.fake_nvml_last_seen_timestamp(gpu)
        if stamp < 0:
            raise ValueError(f"no GPU {gpu} in fake NVML")
        return int(stamp)

    def calls_inside(self) -> int:
        """Return how many calls are sleeping inside the library now (a hang or a delay)."""
        return int(self.lib.fake_nvml_calls_inside())

    def release_hangs(self) -> None:
        """End every ``FAKE_NVML_HANG`` sleep now; calls no longer hang until the next init."""
        self.lib.fake_nvml_release_hangs()


def load_fake_nvml(lib_dir: Path) -> FakeNvml:
    """Point the in-process ``pynvml`` bindings at the stand-in library in ``lib_dir``.

    Sets ``pynvml.nvmlLib`` and clears the bindings' function-pointer cache, so the
    next ``pynvml.nvmlInit()`` talks to the stand-in. Use :func:`unload_fake_nvml`
    afterwards.
    """
    import pynvml

    path = Path(lib_dir) / LIBRARY_NAME
    lib = ctypes.CDLL(str(path))
    for hook in (
        "fake_nvml_call_count",
        "fake_nvml_gpu_call_count",
        "fake_nvml_device_queries",
        "fake_nvml_calls_inside",
        "fake_nvml_last_seen_timestamp",
    ):
        getattr(lib, hook).restype = ctypes.c_longlong
    lib.fake_nvml_release_hangs.restype = None
    lib.fake_nvml_call_count.argtypes = [ctypes.c_char_p]
    lib.fake_nvml_gpu_call_count.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.fake_nvml_device_queries.argtypes = [ctypes.c_int]
    lib.fake_nvml_last_seen_timestamp.argtypes = [ctypes.c_int]
    with pynvml.libLoadLock:
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlLib_refcount = 0
    return FakeNvml(lib=lib, path=path)


def unload_fake_nvml() -> None:
    """Make the in-process ``pynvml`` bindings forget any loaded library.

    The shared object stays mapped (a process cannot safely unload it), but the
    bindings will look for ``libnvidia-ml.so.1`` afresh on the next init.
    """
    import pynvml

    with pynvml.libLoadLock:
        pynvml.nvmlLib = None
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlLib_refcount = 0


__all__ = [
    "LIBRARY_NAME",
    "SOURCE",
    "CompilerNotFound",
    "FakeNvml",
    "build_fake_nvml",
    "find_c_compiler",
    "load_fake_nvml",
    "omittable_functions",
    "unload_fake_nvml",
]
