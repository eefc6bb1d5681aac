"""Which build of torch to install: CUDA for a given NVIDIA driver and GPU, ROCm for AMD
GPUs, XPU for Intel GPUs.

PyTorch publishes CUDA wheels on one index per CUDA version ("channel"),
``https://download.pytorch.org/whl/cuXYZ``. A driver runs a build whose CUDA
version is at most the driver's own (``nvidia-smi``'s "CUDA Version"), so the
right channel is the newest one not newer than the driver.

A build runs on a GPU only if it carries code for the GPU's compute capability
(``torch.cuda.get_arch_list()``): compiled code (``sm_80``) runs on GPUs of the same
major version and an equal or later minor one (8.0, 8.6, 8.9); PTX (``compute_80``)
is compiled by the driver at first use for any GPU of that capability or later.

ROCm and XPU builds carry their own runtime (HIP, SYCL) and need only the kernel driver
(amdgpu; i915 or xe, with Intel's Level Zero runtime), so one channel each serves.
"""

from __future__ import annotations

from enum import Enum

INDEX_URL = "https://download.pytorch.org/whl"
"""PyTorch's wheel index; a channel is a folder under it."""

CHANNEL_CODE: dict[str, dict[str, frozenset[int]]] = {
    "cu130": {
        "x86_64": frozenset({75, 80, 86, 90, 100, 120}),
        "aarch64": frozenset({80, 90, 100, 110, 120}),
    },
    "cu129": {
        "x86_64": frozenset({75, 80, 86, 90, 100, 120}),
        "aarch64": frozenset({80, 90, 100, 120}),
    },
    "cu128": {
        "x86_64": frozenset({75, 80, 86, 90, 100, 120}),
        "aarch64": frozenset({80, 90, 100, 120}),
    },
    "cu126": {
        "x86_64": frozenset({50, 60, 70, 75, 80, 86, 90}),
        "aarch64": frozenset({80, 90}),
    },
    "cu124": {"x86_64": frozenset({50, 60, 70, 75, 80, 86, 90})},
    "cu121": {"x86_64": frozenset({50, 60, 70, 75, 80, 86, 90})},
    "cu118": {"x86_64": frozenset({50, 60, 70, 75, 80, 86, 90})},
}
"""The CUDA wheel channels PyTorch has published, newest first (``cu128`` for CUDA 12.8,
:func:`channel_version`), each with the compiled code (``sm_XY`` as ``XY``) of its newest
torch, per processor, as ``torch.cuda.get_arch_list()`` lists it (torch 2.13's own table,
``torch.cuda.PYTORCH_RELEASES_CODE_CC``, for cu126 to cu130; torch 2.11 dropped sm_70
from cu128). Blackwell (10.0, 12.0) needs cu128 or later.

Older torch releases are only on the older channels (torch 2.6 is the last on
cu124, 2.5 the last on cu121), so an old driver gets a working but older torch.
"""


ROCM_CHANNEL = "rocm7.2"
"""The ROCm channel of the newest torch: AMD GPUs, through torch's ``cuda`` device."""
ROCM_ARCH = (
    "gfx900;gfx906;gfx908;gfx90a;gfx942;gfx950;gfx1030;gfx1100;gfx1101;gfx1102;gfx1103;"
    "gfx1150;gfx1151;gfx1200;gfx1201"
)
"""The GPU targets the newest torch on :data:`ROCM_CHANNEL` carries code for, as its wheel
builder lists them (``PYTORCH_ROCM_ARCH`` in torch's ``.ci/docker/manywheel/build.sh``); it
runs no other, such as the gfx1036 of Ryzen 7000's graphics, without
``HSA_OVERRIDE_GFX_VERSION``."""
XPU_CHANNEL = "xpu"
"""The channel of torch's XPU builds: Intel GPUs, as ``xpu:N``."""
CPU_CHANNEL = "cpu"
"""The channel of torch's CPU-only builds: no CUDA libraries (PyPI's Linux torch has them)."""


def parse_cuda_version(text: str | None) -> tuple[int, int] | None:
    """``"12.4"`` -> ``(12, 4)``; ``None`` for ``None`` or anything else."""
    if not text:
        return None
    major, _, minor = text.strip().partition(".")
    minor = minor.split(".", 1)[0] or "0"
    if not (major.isdigit() and minor.isdigit()):
        return None
    return int(major), int(minor)


def channel_for_driver(driver_cuda: tuple[int, int]) -> str | None:
    """The newest channel a driver supporting CUDA ``driver_cuda`` can run; ``None`` if none."""
    return next((c for c in CHANNEL_CODE if channel_version(c) <= driver_cuda), None)


def channel_version(channel: str) -> tuple[int, int]:
    """``cu128`` -> ``(12, 8)``: the CUDA version a channel's name gives (its last digit the
    minor version)."""
    return int(channel[2:-1]), int(channel[-1])


def install_command(
    channel: str,
    *,
    python: str = "python",
    packages: tuple[str, ...] = ("torch",),
    replace: bool = True,
) -> str:
    """The exact command that installs ``packages`` (``torch``, and ``torchvision`` or
    ``torchaudio`` where installed: they are built against one torch and must match it) from
    ``channel`` (``cu124``, :data:`ROCM_CHANNEL`...) into ``python``. ``replace`` uninstalls
    them first: else pip keeps an installed ``torch 2.x+cpu``, which satisfies ``torch``."""
    names = " ".join(packages)
    install = f"{python} -m pip install {names} --index-url {INDEX_URL}/{channel}"
    if replace:
        return f"{python} -m pip uninstall -y {names} && {install}"
    return install


INTEGRATED = frozenset({53, 62, 72, 87, 101})
"""Jetson and Thor GPUs: only code built for exactly them runs there (torch's rule),
and Thor's 10.1 became 11.0 in CUDA 13, so ``sm_101`` also runs on 11.0."""


class GpuCode(str, Enum):
    """What a build carries for one GPU."""

    COMPILED = "compiled"
    """Compiled code (``sm_XY``) that runs on it."""
    PTX = "ptx"
    """Only PTX (``compute_XY``) that the driver compiles for it at first use."""
    NONE = "none"
    """Nothing it can run: every kernel fails with "no kernel image is available"."""


def parse_capability(text: str | None) -> int | None:
    """``"9.0"`` -> ``90``, ``"12.0"`` -> ``120``; ``None`` for anything else."""
    version = parse_cuda_version(text)
    if version is None or not 0 <= version[1] <= 9:
        return None
    return 10 * version[0] + version[1]


def format_capability(capability: int) -> str:
    """``120`` -> ``12.0``."""
    return f"{capability // 10}.{capability % 10}"


def _parse_arch(arch: str) -> tuple[str, int, str] | None:
    """``sm_90a`` -> ``("sm", 90, "a")``; ``compute_120`` -> ``("compute", 120, "")``."""
    kind, _, rest = arch.strip().lower().partition("_")
    suffix = rest[-1:] if rest[-1:] in ("a", "f") else ""
    number = rest[: len(rest) - len(suffix)]
    if kind not in ("sm", "compute") or not number.isdigit():
        return None
    return kind, int(number), suffix


def _same_family(code: int, capability: int) -> bool:
    """Compiled code for ``code`` runs on ``capability`` (same major, minor not older)."""
    if code in INTEGRATED or capability in INTEGRATED:
        return code == capability or (code == 101 and capability == 110)
    return code // 10 == capability // 10 and capability >= code


def _runs(kind: str, code: int, suffix: str, capability: int) -> bool:
    if suffix == "a":  # sm_90a, compute_90a: exactly that GPU
        return code == capability
    if kind == "sm" or suffix == "f":
        return _same_family(code, capability)
    return capability >= code  # PTX: the driver compiles it for any later GPU


def gpu_code(capability: int, arch_list: tuple[str, ...]) -> GpuCode:
    """Whether a build with ``arch_list`` runs on a GPU of ``capability`` (``90`` for 9.0).

    ``a`` code (``sm_90a``) runs only on exactly its GPU; ``f`` code (``sm_100f``) on its
    family, as plain compiled code does.
    """
    ptx = False
    for parsed in filter(None, map(_parse_arch, arch_list)):
        kind, code, suffix = parsed
        if _runs(kind, code, suffix, capability):
            if kind == "sm":
                return GpuCode.COMPILED
            ptx = True
    return GpuCode.PTX if ptx else GpuCode.NONE


def channels_for_gpu(capability: int, machine: str | None) -> tuple[str, ...]:
    """The channels whose newest torch carries compiled code for ``capability``, newest
    first; ``machine`` is ``platform.machine()`` (``aarch64``, else x86_64 is assumed)."""
    key = "aarch64" if (machine or "").lower() in ("aarch64", "arm64") else "x86_64"
    return tuple(
        channel
        for channel, carried in CHANNEL_CODE.items()
        if any(_same_family(code, capability) for code in carried.get(key, ()))
    )


def cuda_install_fix(driver_cuda: str | None, *, python: str, packages: tuple[str, ...]) -> str:
    """The exact command for a CUDA build a driver for CUDA ``driver_cuda`` (NVML's word;
    ``None``: unknown) runs, or what to do when there is none (:func:`install_command`)."""
    driver = parse_cuda_version(driver_cuda)
    channel = channel_for_driver(driver) if driver is not None else None
    if channel is not None:
        return install_command(channel, python=python, packages=packages)
    oldest_channel = list(CHANNEL_CODE)[-1]
    oldest = "{}.{}".format(*channel_version(oldest_channel))  # e.g. 11.8
    fallback = install_command(oldest_channel, python=python, packages=packages)
    if driver_cuda is None:
        return (
            "run nvidia-smi, read its 'CUDA Version' and pick the newest channel not newer "
            f"than it at https://pytorch.org/get-started/locally/, e.g. `{fallback}`"
        )
    return (
        f"the driver supports CUDA {driver_cuda}, older than any CUDA build "
        f"of torch: update the NVIDIA driver (CUDA {oldest} or later), then `{fallback}`"
    )


def gpu_code_fix(
    capability: int,
    machine: str | None,
    driver_cuda: str | None,
    *,
    python: str,
    packages: tuple[str, ...],
) -> str:
    """The exact command for a build with code for a GPU of ``capability`` that a driver for
    CUDA ``driver_cuda`` (``None``: unknown) runs on ``machine``, or what to do instead."""
    channels = channels_for_gpu(capability, machine)
    shown = format_capability(capability)
    if not channels:
        return (
            f"no PyTorch wheel carries code for compute capability {shown}: build torch from "
            f"source with `TORCH_CUDA_ARCH_LIST={shown}`, or use a vendor's build for this GPU"
        )
    driver = parse_cuda_version(driver_cuda)
    runnable = [c for c in channels if driver is not None and channel_version(c) <= driver]
    if runnable:
        return install_command(runnable[0], python=python, packages=packages)
    oldest = channels[-1]
    needs = ".".join(str(part) for part in channel_version(oldest))
    command = install_command(oldest, python=python, packages=packages)
    if driver is None:
        return (
            f"install a build with code for this GPU (it needs a driver for CUDA {needs} "
            f"or later): `{command}`"
        )
    return (
        f"the driver supports CUDA {driver_cuda}, older than any build with code for this "
        f"GPU: update the NVIDIA driver (CUDA {needs} or later), then `{command}`"
    )
