"""AMD and Intel GPUs for the doctor: which torch build uses them, and why a ROCm or XPU
build sees none.

A ROCm build reaches AMD GPUs through ``/dev/kfd`` (the amdgpu driver's compute interface)
and the DRM render nodes (``/dev/dri/renderD*``), both usually group ``render`` (``video`` on
older systems), and carries code for some GPUs only (:data:`~gputui.doctor.wheels.ROCM_ARCH`);
an XPU build reaches Intel GPUs through the render nodes. Variables can hide GPUs
(:data:`ROCM_VARIABLES`).

:func:`drm_facts` gathers this machine's facts (the cards from sysfs, their targets from KFD's
topology, the device nodes, the user, the variables); the checks here are pure, so each is
tested on facts of other boxes.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gputui.doctor.checks import Check, Status
from gputui.doctor.torch_facts import TorchFacts
from gputui.doctor.wheels import ROCM_ARCH, ROCM_CHANNEL, XPU_CHANNEL, install_command
from gputui.format import fmt_counted
from gputui.pci import pci_bus_id
from gputui.telemetry.readings import Vendor
from gputui.telemetry.sysfs import SYSFS_ENV, CardList, DrmCard, SysfsFiles

ROCM_VARIABLES = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
"""The variables that hide AMD GPUs from a ROCm build, in the order torch applies them
(``torch.cuda._parse_visible_devices``): the ROCm runtime's picks from the GPUs; HIP's, or
``CUDA_VISIBLE_DEVICES`` where HIP's is unset, indexes into what ROCR's left."""

INTEL_RUNTIME = (
    "install Intel's GPU compute runtime (Level Zero: libze-intel-gpu1, or "
    "intel-level-zero-gpu on older releases) as PyTorch's 'Getting Started on Intel GPU' "
    "page describes"
)
"""What an XPU build needs besides the kernel driver."""


@dataclass(frozen=True, slots=True)
class DevNode:
    """A device node a GPU build opens, and who may open it."""

    path: str
    """E.g. ``/dev/kfd``."""
    mode: int
    """Its permission bits (``0o660``)."""
    owner: str
    """Its owner's name (or number)."""
    group: str
    """Its group's name (or number), e.g. ``render``."""
    openable: bool
    """Whether this user may open it for reading and writing (ACLs included)."""
    bus_id: str | None = None
    """A render node's GPU (its PCI bus id, from sysfs); ``None`` for ``/dev/kfd``, or
    unknown."""

    def describe(self) -> str:
        """``/dev/kfd (crw-rw---- root:render)``."""
        return f"{self.path} ({stat.filemode(stat.S_IFCHR | self.mode)} {self.owner}:{self.group})"


@dataclass(frozen=True, slots=True)
class UserFacts:
    """Who runs the doctor."""

    name: str
    """The user's name."""
    groups: frozenset[str] = frozenset()
    """The groups this login has (``id -Gn``)."""
    listed: frozenset[str] = frozenset()
    """The groups ``/etc/group`` lists the user in: one missing from ``groups`` was added
    after this login began."""


@dataclass(frozen=True, slots=True)
class DrmFacts:
    """AMD and Intel GPUs here, and what a ROCm or XPU build needs to reach them."""

    cards: tuple[DrmCard, ...] = ()
    """The GPUs sysfs lists on amdgpu, i915 or xe."""
    gfx: dict[str, str] = field(default_factory=dict)
    """Each AMD GPU's target (``gfx1036``) by PCI bus id, from KFD's topology
    (:func:`kfd_targets`); a GPU missing is unknown."""
    kfd: DevNode | None = None
    """``/dev/kfd``; ``None`` when it is not there."""
    render_nodes: tuple[DevNode, ...] = ()
    """``/dev/dri/renderD*``."""
    user: UserFacts | None = None
    """Who asks; ``None`` when unknown."""
    variables: dict[str, str] = field(default_factory=dict)
    """Those of :data:`ROCM_VARIABLES` that are set, with their values."""

    def of(self, vendor: Vendor) -> tuple[DrmCard, ...]:
        """The cards of ``vendor``."""
        return tuple(card for card in self.cards if card.vendor is vendor)


# ------------------------------------------------------------------ gathering


def drm_facts(
    *,
    sysfs: Path | None = None,
    dev: Path = Path("/dev"),
    environ: Mapping[str, str] | None = None,
    user: UserFacts | None = None,
) -> DrmFacts:
    """This machine's facts: the cards under ``sysfs`` (default: ``environ``'s
    ``GPUTUI_SYSFS``, else ``/sys``), the nodes under ``dev``, the user (default: this
    process's) and the variables of ``environ`` (default: this process's)."""
    env = os.environ if environ is None else environ
    root = sysfs or Path(env.get(SYSFS_ENV) or "/sys")
    cards = tuple(CardList(root, SysfsFiles()).cards())
    try:
        render = sorted(p for p in (dev / "dri").iterdir() if p.name.startswith("renderD"))
    except OSError:
        render = []
    nodes = (dev_node(path, _bus_id(root / "class" / "drm" / path.name)) for path in render)
    return DrmFacts(
        cards=cards,
        gfx=kfd_targets(root),
        kfd=dev_node(dev / "kfd"),
        render_nodes=tuple(node for node in nodes if node is not None),
        user=user or current_user(),
        variables={name: env[name] for name in ROCM_VARIABLES if name in env},
    )


def kfd_targets(sysfs: Path) -> dict[str, str]:
    """Each GPU's target by PCI bus id, from ``class/kfd/kfd/topology/nodes/N/properties``:
    ``gfx_target_version`` 100306 is gfx1036 (its minor and stepping written in hex), 0 a
    CPU's node; ``location_id`` is the bus, device and function, ``domain`` the PCI domain."""
    found = {}
    for path in sorted((sysfs / "class/kfd/kfd/topology/nodes").glob("*/properties")):
        try:
            fields = dict(line.split(maxsplit=1) for line in path.read_text().splitlines())
            version, where = int(fields.get("gfx_target_version", 0)), int(fields["location_id"])
            domain = int(fields.get("domain", 0))
        except (OSError, ValueError, KeyError):
            continue
        if version:
            bus = pci_bus_id(domain, where >> 8, (where >> 3) & 0x1F, where & 0x7)
            found[bus] = f"gfx{version // 10000}{version // 100 % 100:x}{version % 100:x}"
    return found


def _bus_id(node: Path) -> str | None:
    """The PCI bus id of a DRM node's device (``class/drm/renderD128/device``'s target)."""
    target = os.path.realpath(node / "device")
    return os.path.basename(target) if os.path.isdir(target) else None


def dev_node(path: Path, bus_id: str | None = None) -> DevNode | None:
    """The node at ``path`` (of the GPU at ``bus_id``); ``None`` when there is none."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return DevNode(
        path=str(path),
        mode=stat.S_IMODE(info.st_mode),
        owner=_user_name(info.st_uid),
        group=_group_name(info.st_gid),
        openable=os.access(path, os.R_OK | os.W_OK),
        bus_id=bus_id,
    )


def current_user() -> UserFacts:
    """This process's user, its login's groups, and the groups ``/etc/group`` lists it in."""
    name = _user_name(os.getuid())
    groups = frozenset(_group_name(gid) for gid in {os.getgid(), *os.getgroups()})
    try:
        listed = frozenset(entry.gr_name for entry in grp.getgrall() if name in entry.gr_mem)
    except OSError:
        listed = frozenset()
    return UserFacts(name, groups, listed | groups)


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


# ------------------------------------------------------------------ checks


def _gpus(cards: tuple[DrmCard, ...], vendor: str) -> str:
    """``2 AMD GPUs (amdgpu) at 0000:03:00.0 and 0000:83:00.0``."""
    buses = [card.bus_id for card in cards]
    at = buses[0] if len(buses) == 1 else f"{', '.join(buses[:-1])} and {buses[-1]}"
    drivers = "/".join(sorted({card.driver for card in cards}))
    return f"{fmt_counted(len(cards), f'{vendor} GPU')} ({drivers}) at {at}"


def cpu_build_check(
    drm: DrmFacts, version: str | None, *, python: str, packages: tuple[str, ...]
) -> Check | None:
    """A CPU-only torch beside AMD or Intel GPUs: the command for the build that uses them;
    ``None`` when there are none.

    AMD GPUs with ``/dev/kfd`` fail (a ROCm build would use them) unless their target is
    known and the ROCm build carries no code for it (an APU's, most often), which warns, as
    Intel GPUs do: nearly every Intel PC has one built in, which few would train on.
    """
    name, torch = "torch build", f"torch {version} is a CPU-only build"
    amd, intel = drm.of(Vendor.AMD), drm.of(Vendor.INTEL)
    runs = tuple(card for card in amd if drm.gfx.get(card.bus_id) in {None, *ROCM_ARCH.split(";")})
    rocm = install_command(ROCM_CHANNEL, python=python, packages=packages)
    if runs and drm.kfd is not None:
        return Check(
            name,
            Status.FAIL,
            f"{torch}, but there {'is' if len(runs) == 1 else 'are'} {_gpus(runs, 'AMD')} "
            "with /dev/kfd: PyTorch's ROCm build runs them, as cuda:N.",
            rocm,
        )
    if amd and drm.kfd is not None:
        targets = " and ".join(sorted({drm.gfx[card.bus_id] for card in amd}))
        return Check(
            name,
            Status.WARN,
            f"{torch}; there {'is' if len(amd) == 1 else 'are'} {_gpus(amd, 'AMD')}, "
            f"{targets}, for which PyTorch's ROCm build carries no code.",
            f"to try it anyway: `{rocm}`, with HSA_OVERRIDE_GFX_VERSION set to the nearest "
            "target it carries (AMD does not support this)",
        )
    if amd:
        return Check(
            name,
            Status.WARN,
            f"{torch}; there {'is' if len(amd) == 1 else 'are'} {_gpus(amd, 'AMD')}, but no "
            "/dev/kfd, through which a ROCm build reaches them.",
            f"{_NO_KFD}, then `{rocm}`",
        )
    if intel:
        return Check(
            name,
            Status.WARN,
            f"{torch}; there {'is' if len(intel) == 1 else 'are'} {_gpus(intel, 'Intel')}: "
            "PyTorch's XPU build runs them, as xpu:N.",
            f"to train on it: `{install_command(XPU_CHANNEL, python=python, packages=packages)}`"
            f" ({INTEL_RUNTIME})",
        )
    return None


_NO_KFD = (
    "in a container, pass the devices (`--device=/dev/kfd --device=/dev/dri`); on the host, "
    "load amdgpu with compute support (`sudo modprobe amdgpu`; `sudo dmesg | grep -i kfd` "
    "says why it is missing)"
)


@dataclass(frozen=True, slots=True)
class Hiding:
    """A variable that hides AMD GPUs from a ROCm build."""

    name: str
    """E.g. ``HIP_VISIBLE_DEVICES``."""
    value: str
    """As set."""
    shown: int | None
    """How many GPUs it leaves (0: none); ``None`` when it cannot be told."""

    def __str__(self) -> str:
        return f"{self.name}={self.value!r}"


def hiding(drm: DrmFacts) -> tuple[Hiding, ...]:
    """The variables set that leave fewer GPUs than the AMD cards here (or none), in torch's
    order (:data:`ROCM_VARIABLES`).

    Each is a comma list of indexes or UUIDs, read as HIP reads it: empty shows none, and
    the list ends at the first entry that is negative, not a number or UUID, or names an
    index past the GPUs left (when they are known). After one that hides every GPU, the
    next is read as it would be once that one is unset.
    """
    count = len(drm.of(Vendor.AMD))
    found = []
    hip = "HIP_VISIBLE_DEVICES" in drm.variables
    for name in ROCM_VARIABLES:
        value = drm.variables.get(name)
        if value is None or (hip and name == "CUDA_VISIBLE_DEVICES"):
            continue
        shown = 0
        for entry in (part.strip() for part in value.split(",")):
            if entry.upper().startswith("GPU-") or (
                entry.isdigit() and (not count or int(entry) < count)
            ):
                shown += 1
            else:
                break
        if shown == 0 or (count and shown < count):
            found.append(Hiding(name, value, shown))
        count = shown or count
    return tuple(found)


def rocm_cuda_check(drm: DrmFacts, message: str, *, available: bool, count: int) -> Check:
    """``torch.cuda`` on a ROCm build: the AMD GPUs it sees, or why it sees none and the fix;
    ``message`` is what torch said (``is_available()``, ``device_count()``, the error)."""
    name = "torch.cuda"
    amd = drm.of(Vendor.AMD)
    hidden = hiding(drm)
    message = _ended(message)
    if available:
        some = [h for h in hidden if h.shown]
        if some and count < len(amd):
            shows = " and ".join(str(h) for h in some)
            return Check(
                name,
                Status.WARN,
                f"{message} {shows} shows {count} of the {len(amd)} AMD GPUs.",
                f"`unset {' '.join(h.name for h in some)}` if torch should use every GPU",
            )
        return Check(name, Status.OK, message)
    every = [h for h in hidden if h.shown == 0]
    if every:
        return Check(
            name,
            Status.FAIL,
            f"{message} {' and '.join(map(str, every))} hides every GPU from HIP.",
            f"`unset {' '.join(h.name for h in every)}`",
        )
    if not amd and drm.kfd is None:
        return Check(name, Status.SKIP, f"No AMD GPU here (no amdgpu card, no /dev/kfd); {message}")
    if drm.kfd is None:
        return Check(
            name,
            Status.FAIL,
            f"{message} There {'is' if len(amd) == 1 else 'are'} {_gpus(amd, 'AMD')}, but no "
            "/dev/kfd, through which ROCm reaches them.",
            _NO_KFD,
        )
    return _access_check(name, drm, message, "ROCm") or Check(
        name,
        Status.FAIL,
        message,
        "`rocminfo` lists the GPUs the ROCm runtime sees, and `sudo dmesg | grep -i amdgpu` "
        "what the driver refused; a GPU ROCm does not support needs its HSA_OVERRIDE_GFX_VERSION",
    )


def xpu_check(drm: DrmFacts, torch: TorchFacts) -> Check:
    """``torch.xpu`` on an XPU build (``is_available()``, ``device_count()``): the Intel GPUs it
    sees, or why it sees none."""
    name = "torch.xpu"
    xpu = torch.xpu
    if xpu is None or xpu.available is None:
        return Check(name, Status.SKIP, "Unknown: the torch probe stopped before asking XPU.")
    count = xpu.device_count or 0
    names = [f"{d.device} {d.name}" for d in torch.devices if d.device.kind == "xpu"]
    listed = f": {', '.join(names)}" if names else ""
    message = _ended(f"`is_available()` is {xpu.available}, `device_count()` is {count}{listed}")
    if xpu.available and count:
        return Check(name, Status.OK, message)
    intel = drm.of(Vendor.INTEL)
    if not intel:
        return Check(name, Status.SKIP, f"No Intel GPU here (none on i915 or xe); {message}")
    return _access_check(name, drm, message, "XPU") or Check(
        name,
        Status.FAIL,
        f"{message} There {'is' if len(intel) == 1 else 'are'} {_gpus(intel, 'Intel')}.",
        INTEL_RUNTIME,
    )


def _ended(message: str) -> str:
    """``message`` ending as a sentence, so that another can follow (torch's errors may not)."""
    return message if message.endswith((".", "!", "?")) else f"{message}."


def _access_check(name: str, drm: DrmFacts, message: str, build: str) -> Check | None:
    """A failed check when this user cannot open a node the build needs (``/dev/kfd`` for
    ROCm, the render nodes of the vendor's GPUs); ``None`` if it can."""
    vendor = Vendor.INTEL if build == "XPU" else Vendor.AMD
    ours = {card.bus_id for card in drm.of(vendor)}
    render = [node for node in drm.render_nodes if node.bus_id is None or node.bus_id in ours]
    nodes = render if build == "XPU" else [*filter(None, [drm.kfd]), *render]
    closed = [node for node in nodes if not node.openable]
    if not closed:
        return None
    user = drm.user
    who = f"you ({user.name})" if user is not None else "this user"
    groups = sorted({node.group for node in closed if not node.group.isdigit()} - {"root"})
    groups = groups or ["render", "video"]
    which = ", ".join(node.describe() for node in closed)
    said = f"{message} {who[0].upper()}{who[1:]} cannot open {which}, which {build} needs."
    if user is not None and all(g in user.listed for g in groups):
        fix = (
            f"{user.name} was added to {' and '.join(groups)} after this login began: log "
            f"out and back in (or run `newgrp {groups[0]}`)"
        )
    else:
        login = user.name if user is not None else "$USER"
        fix = f"`sudo usermod -aG {','.join(groups)} {login}`, then log out and back in"
    return Check(name, Status.FAIL, said, fix)
