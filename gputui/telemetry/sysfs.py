"""GPUs in sysfs: where the roots are, which DRM cards are GPUs, and reading their files so
that a missing, unreadable or garbled file is ``None`` and a debug note, never an exception.

The roots follow node_exporter's ``--path.sysfs`` and ``--path.procfs``: ``GPUTUI_SYSFS``
and ``GPUTUI_PROCFS`` point them elsewhere (a host's ``/sys`` mounted in a container, a test
tree). A GPU is a ``card<N>`` under ``class/drm`` whose PCI device is bound to a driver
gputui reads (amdgpu, i915, xe); render nodes (``renderD128``) and connectors
(``card0-DP-1``) are not GPUs, and two nodes of one PCI device are one GPU.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import re
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputui.files import open_regular
from gputui.telemetry.readings import GpuProcess, GpuReading, GpuState, Vendor

log = logging.getLogger(__name__)

SYSFS_ENV = "GPUTUI_SYSFS"
"""Names the sysfs root (default ``/sys``)."""
PROCFS_ENV = "GPUTUI_PROCFS"
"""Names the procfs root (default ``/proc``)."""
MOUNTINFO = Path("/proc/self/mountinfo")
"""This process's mounts, with each one's file system type."""

DRIVERS = {"amdgpu": Vendor.AMD, "i915": Vendor.INTEL, "xe": Vendor.INTEL}
"""The kernel drivers whose GPUs gputui reads from sysfs (NVIDIA's are NVML's)."""

POWER_CAP_TTL_S = 30.0
"""Seconds a power cap is trusted before it is read again (an admin may change it)."""
LINK_TTL_S = 1.0
"""Seconds a card's current PCIe link is trusted before it is read again, as NVML's is
(``PCIE_TTL_S`` in gputui.telemetry.nvml.queries): it trains down and up with the load, not
from one sample to the next."""
KEEP_OPEN_MAX = 256
"""Files a sampler keeps open at most (each card's few read every sample)."""
READ_MAX = 65536
"""Bytes read of one file: sysfs gives a page at most (``gpu_metrics`` a few kB)."""

GONE_ERRNOS = frozenset({errno.ENODEV, errno.ENXIO, errno.ESHUTDOWN})
"""What a driver answers for a device that was unplugged or fell off the bus."""

_LINK_SPEED = re.compile(r"\s*(\d+(?:\.\d+)?)\s*GT/s")
_GENERATIONS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
"""PCIe generation by link speed in GT/s."""
_MOUNT_ESCAPE = re.compile(r"\\([0-7]{3})")
"""mountinfo's escapes in a mount point: ``\\040`` is a space."""
_PCI_ID = re.compile(r"([0-9a-fA-F]{1,4}):([0-9a-fA-F]{1,4})")
"""A uevent's ``PCI_ID``: vendor and device id in hex (``1002:744C``)."""


def sysfs_root() -> Path:
    """``GPUTUI_SYSFS``, else ``/sys``."""
    return Path(os.environ.get(SYSFS_ENV) or "/sys")


def procfs_root() -> Path:
    """``GPUTUI_PROCFS``, else ``/proc``."""
    return Path(os.environ.get(PROCFS_ENV) or "/proc")


def on_sysfs(path: Path, mountinfo: Path | None = None) -> bool:
    """Whether ``path`` is on a sysfs mount (:func:`mount_type`)."""
    return mount_type(path, mountinfo) == "sysfs"


def mount_type(path: Path | str, mountinfo: Path | None = None) -> str | None:
    """The file system type of the mount ``path`` is on (``sysfs``, ``proc``): the last of
    ``mountinfo``'s mounts at the deepest mount point above it (``os.statvfs`` gives no file
    system type); ``None`` where ``mountinfo`` (default :data:`MOUNTINFO`) cannot be read."""
    target = os.path.realpath(path)
    try:
        # on "\n" alone, not splitlines(): a mount point's name may hold "\x1c"
        lines = (mountinfo or MOUNTINFO).read_text(errors="replace").split("\n")
    except OSError:
        return None
    deepest, found = -1, None
    for line in lines:
        ids, _, fs = line.partition(" - ")
        fields = ids.split()
        if len(fields) < 5 or not fs:
            continue
        point = _MOUNT_ESCAPE.sub(lambda m: chr(int(m[1], 8)), fields[4])
        if len(point) >= deepest and (
            target == point or target.startswith(point.rstrip("/") + "/")
        ):
            deepest, found = len(point), fs.split()[0]
    return found


class DeviceGone(Exception):
    """The driver says the device is gone (ENODEV): unplugged, or fallen off the bus."""


@dataclass(frozen=True, slots=True)
class DrmCard:
    """One GPU's DRM card node, as its ``device/uevent`` describes the PCI device."""

    path: Path
    """``<sysfs>/class/drm/cardN``."""
    bus_id: str
    """The PCI device, lowercase as the kernel writes it: ``0000:03:00.0``."""
    driver: str
    """``amdgpu``, ``i915`` or ``xe``."""
    vendor: Vendor
    """Whose GPU."""
    pci_id: tuple[int, int] | None
    """PCI vendor and device id (``0x1002, 0x74a1``), when the uevent gives them."""

    @property
    def device(self) -> Path:
        """The PCI device's folder (``cardN/device``), where most files are."""
        return self.path / "device"


class CardList:
    """The GPUs under ``<sysfs>/class/drm``, listed each sample: a node's ``uevent`` is read
    when the node is new or its link points elsewhere (a driver bound again)."""

    def __init__(self, sysfs: Path, files: SysfsFiles) -> None:
        """List ``sysfs``'s cards with ``files``."""
        self._drm = sysfs / "class" / "drm"
        self._files = files
        self._known: dict[str, tuple[str | None, DrmCard | None]] = {}

    def cards(self) -> list[DrmCard]:
        """Every GPU gputui reads, one per PCI device, in bus id order."""
        drm = os.fspath(self._drm)
        try:
            names = [n for n in os.listdir(drm) if n.startswith("card") and n[4:].isdecimal()]
        except OSError:
            return []  # no DRM at all (a container without /sys/class/drm, a VM)
        known, self._known = self._known, {}
        found: dict[str, DrmCard] = {}
        for name in sorted(names, key=lambda n: int(n[4:])):
            try:
                target: str | None = os.readlink(f"{drm}/{name}")
            except OSError:
                target = None  # not a link (a copied tree): read its uevent each time
            before = known.get(name)
            if target is not None and before is not None and before[0] == target:
                card = before[1]
            else:
                card = _card(self._drm / name, self._files)
            self._known[name] = (target, card)
            if card is not None and card.bus_id not in found:
                found[card.bus_id] = card
        return [found[bus_id] for bus_id in sorted(found)]


def _card(path: Path, files: SysfsFiles) -> DrmCard | None:
    """The card at ``path`` if its device is a PCI GPU bound to a driver gputui reads."""
    try:
        uevent = files.text(path / "device" / "uevent", quiet=True)
    except DeviceGone:
        return None
    if uevent is None:
        return None
    fields = dict(line.partition("=")[::2] for line in uevent.splitlines() if "=" in line)
    driver = fields.get("DRIVER", "")
    slot = fields.get("PCI_SLOT_NAME", "").strip().lower()
    if driver not in DRIVERS or not slot:
        return None
    ids = _PCI_ID.fullmatch(fields.get("PCI_ID", ""))
    pci_id = (int(ids[1], 16), int(ids[2], 16)) if ids else None
    return DrmCard(path, slot, driver, DRIVERS[driver], pci_id)


class SysfsFiles:
    """Reads small files, turning every failure into ``None`` and one debug note per file
    and reason.

    With ``keep_open``, a file read every sample is kept open (at most ``KEEP_OPEN_MAX``) and
    read again from its start (``pread``), as sysfs answers afresh at offset 0: an ``open``
    walks the whole path each time. Not for a copied tree: one refreshed by renaming files in
    (rsync) would be read from the old, deleted files forever.
    """

    def __init__(self, *, keep_open: bool = False) -> None:
        """Read files, keeping those read every sample open if ``keep_open`` (a real sysfs)."""
        self._keep_open = keep_open
        self._noted: set[tuple[str, str]] = set()
        self._kept: dict[str, int] = {}
        self._lock = threading.Lock()  # close() may come from another thread
        self._closed = False
        self._finalizer = weakref.finalize(self, _close_all, self._kept)

    def note(self, path: Path | str, why: str) -> None:
        """Say once, at debug level, that ``path`` read as n/a and why."""
        key = (os.fspath(path), why)
        if key not in self._noted:
            self._noted.add(key)
            log.debug("%s: %s; showing n/a", key[0], why)

    def text(self, path: Path | str, *, quiet: bool = False, keep: bool = False) -> str | None:
        """The file's text, stripped; ``None`` (noted unless ``quiet``) when it cannot be read
        or is not text. ``keep``: a file read every sample, kept open between reads.

        Raises:
            DeviceGone: the driver answered that the device is gone.
        """
        data = self.data(path, quiet=quiet, keep=keep)
        try:
            return None if data is None else data.decode("ascii").strip()
        except UnicodeDecodeError:
            if not quiet:
                self.note(path, "not text")
            return None

    def data(self, path: Path | str, *, quiet: bool = False, keep: bool = False) -> bytes | None:
        """The file's bytes (``READ_MAX`` at most), as :meth:`text` reads them.

        Raises:
            DeviceGone: the driver answered that the device is gone.
        """
        name = os.fspath(path)
        keep = keep and self._keep_open
        if keep:
            with self._lock:
                fd = self._kept.get(name)
                if fd is not None:
                    try:
                        return os.pread(fd, READ_MAX, 0)
                    except OSError:  # its node went (a driver bound again?): open it anew
                        del self._kept[name]
                        os.close(fd)
        try:
            fd = open_regular(name)  # a FIFO planted in a tree would block a plain open
        except FileNotFoundError:
            if not quiet:
                self.note(name, "missing")
            return None
        except OSError as error:
            self._failed(name, error, quiet)
            return None
        kept = False
        try:
            data = os.read(fd, READ_MAX)
            if keep:
                with self._lock:
                    if not self._closed and len(self._kept) < KEEP_OPEN_MAX:
                        self._kept[name] = fd
                        kept = True
        except OSError as error:
            self._failed(name, error, quiet)
            return None
        finally:
            if not kept:
                os.close(fd)
        return data

    def _failed(self, path: str, error: OSError, quiet: bool) -> None:
        """Note a read that failed, unless the device is gone (then raise ``DeviceGone``)."""
        if error.errno in GONE_ERRNOS:
            name = os.path.basename(path)
            raise DeviceGone(f"{name}: {os.strerror(error.errno or 0)}") from error
        if not quiet:
            self.note(path, error.strerror or str(error))

    def close_under(self, folder: Path) -> None:
        """Close the files kept open under ``folder`` (a card lost, or bound again)."""
        prefix = os.fspath(folder) + os.sep
        with self._lock:
            for name in [name for name in self._kept if name.startswith(prefix)]:
                os.close(self._kept.pop(name))

    def close(self) -> None:
        """Close every file kept open; later reads open and close each file."""
        with self._lock:
            self._closed = True
            _close_all(self._kept)

    def integer(self, path: Path | str, *, keep: bool = False) -> int | None:
        """The file's whole number (decimal, or ``0x`` hex); ``None`` (noted) otherwise."""
        text = self.text(path, keep=keep)
        if text is None:
            return None
        try:
            return int(text, 0) if text.startswith("0x") else int(text)
        except ValueError:
            self.note(path, f"not a whole number: {text[:40]!r}")
            return None


def _close_all(kept: dict[str, int]) -> None:
    for fd in kept.values():
        os.close(fd)
    kept.clear()


def hwmon_dir(device: Path) -> Path | None:
    """The device's hwmon folder (``device/hwmon/hwmonN``), if it has one."""
    try:
        names = sorted(n for n in os.listdir(device / "hwmon") if n.startswith("hwmon"))
    except OSError:
        return None
    return device / "hwmon" / names[0] if names else None


def labelled_inputs(hwmon: Path, kind: str, files: SysfsFiles) -> dict[str, str]:
    """Each ``<kind>N_input`` of ``hwmon`` by its label (``temp2_label`` is ``junction``);
    one without a label goes by its own name (``temp1``)."""
    try:
        names = sorted(os.listdir(hwmon))
    except OSError:
        return {}
    inputs: dict[str, str] = {}
    for name in names:
        match = re.fullmatch(rf"({kind}\d+)_input", name)
        if match:
            label = files.text(hwmon / f"{match[1]}_label", quiet=True)
            inputs.setdefault(label or match[1], os.path.join(hwmon, name))
    return inputs


def link_generation(text: str | None) -> int | None:
    """The PCIe generation of a ``current_link_speed`` (``16.0 GT/s PCIe``: 4); ``None`` for
    ``Unknown`` or anything else."""
    match = _LINK_SPEED.match(text or "")
    return _GENERATIONS.get(float(match[1])) if match else None


def link_width(value: int | None) -> int | None:
    """A link width that is one: a port with no link reads 0."""
    return value if value is not None and 0 < value <= 32 else None


def first_present(*paths: Path) -> str | None:
    """The first of ``paths`` that exists (as text: a file read often is named by a ``str``,
    which ``open`` takes as it is)."""
    return next((os.fspath(path) for path in paths if os.path.exists(path)), None)


def subfolders(folder: Path, prefix: str) -> Iterator[Path]:
    """``folder``'s subfolders named ``<prefix><number>``, in number order."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    pattern = re.compile(rf"{re.escape(prefix)}(\d+)")
    numbered = sorted((int(m[1]), name) for name in names if (m := pattern.fullmatch(name)))
    for _, name in numbered:
        yield folder / name


@dataclass
class CardIdentity:
    """What a card is, read once: kept when it can no longer be read."""

    index: int
    """Its place among its vendor's cards."""
    vendor: Vendor
    """Whose GPU."""
    name: str
    """Product name."""
    uuid: str | None
    """A serial number, where the driver gives one."""
    bus_id: str
    """PCI bus id."""

    def reading(self, **fields: Any) -> GpuReading:
        """A reading of this card with ``fields``."""
        return GpuReading(
            index=self.index,
            vendor=self.vendor,
            name=self.name,
            uuid=self.uuid,
            bus_id=self.bus_id,
            **fields,
        )

    def lost(self, error: str) -> GpuReading:
        """Its reading once it cannot be read: its identity, ``lost``, and why."""
        return self.reading(state=GpuState.LOST, error=error, processes=None, **_NOT_READ)


class SysfsCard:
    """What the AMD and Intel readers share: the card, its identity, its PCIe link and the
    readings both drivers give alike. :mod:`gputui.telemetry.drm` reads each through this."""

    integrated = False
    """An APU: its processes' memory is all the system memory they map (GTT too), not VRAM."""

    def __init__(
        self, card: DrmCard, index: int, name: str, serial: str | None, files: SysfsFiles
    ) -> None:
        """Keep the card and what it is (its place among its vendor's cards, its product
        name and serial number), find its hwmon folder and read its link's maxima once."""
        self.card = card
        self.identity = CardIdentity(index, card.vendor, name, serial, card.bus_id)
        self._files = files
        self._hwmon = hwmon_dir(card.device)
        self._link_speed = first_present(card.device / "current_link_speed")
        self._link_width = first_present(card.device / "current_link_width")
        self._link: tuple[float, tuple[int | None, int | None]] | None = None  # (read at, link)
        self._link_max = (
            link_generation(files.text(card.device / "max_link_speed", quiet=True)),
            link_width(files.integer(card.device / "max_link_width")),
        )
        self._power_cap_w: tuple[float, float | None] | None = None  # (read at, watts)

    def read(self, now: float, processes: tuple[GpuProcess, ...] | None) -> GpuReading:
        """One sample of the card; ``now`` is the sampler's clock.

        Raises:
            DeviceGone: the driver says the card is gone.
        """
        raise NotImplementedError

    def _reading(
        self, now: float, processes: tuple[GpuProcess, ...] | None, **fields: Any
    ) -> GpuReading:
        """The card's reading with ``fields``, its link and what no sysfs GPU says."""
        link_gen, link_lanes = self._current_link(now)
        return self.identity.reading(
            state=GpuState.OK,
            pcie_rx_bytes_per_s=None,  # amdgpu's pcie_bw takes a second to answer; i915 none
            pcie_tx_bytes_per_s=None,
            pcie_link_gen=link_gen,
            pcie_link_width_lanes=link_lanes,
            pcie_link_gen_max=self._link_max[0],
            pcie_link_width_max_lanes=self._link_max[1],
            performance_state=None,
            processes=processes,
            **fields,
        )

    def _current_link(self, now: float) -> tuple[int | None, int | None]:
        """The PCIe link's generation and width in lanes (each ``None`` where unknown:
        ``Unknown`` speed, width 0), read at most every ``LINK_TTL_S``."""
        if self._link is not None and now - self._link[0] < LINK_TTL_S:
            return self._link[1]
        files, generation, width = self._files, None, None
        if self._link_speed is not None:
            text = files.text(self._link_speed, keep=True)
            generation = link_generation(text)
            if generation is None and text is not None and text != "Unknown":
                files.note(self._link_speed, "not a link speed")
        if self._link_width is not None:
            width = link_width(files.integer(self._link_width, keep=True))
        self._link = (now, (generation, width))
        return self._link[1]

    def _hwmon_inputs(self, kind: str) -> dict[str, str]:
        """The hwmon's ``<kind>N_input`` files by label (:func:`labelled_inputs`)."""
        return labelled_inputs(self._hwmon, kind, self._files) if self._hwmon else {}

    def _hwmon_file(self, *names: str) -> str | None:
        """The first of the hwmon's files ``names`` that exists."""
        return first_present(*(self._hwmon / name for name in names)) if self._hwmon else None

    def _celsius(self, path: str | None) -> float | None:
        millidegrees = None if path is None else self._files.integer(path, keep=True)
        if millidegrees is None or path is None:
            return None
        if not -50_000 <= millidegrees <= 200_000:
            self._files.note(path, f"{millidegrees} m°C is no temperature")
            return None
        return millidegrees / 1000

    def _cap_w(self, now: float, path: str | None) -> float | None:
        """The power cap in ``path`` (µW; 0: none), read at most every ``POWER_CAP_TTL_S``
        (an admin may change it)."""
        cached = self._power_cap_w
        if cached is None or now - cached[0] >= POWER_CAP_TTL_S:
            microwatts = self._files.integer(path) if path else None
            watts = microwatts / 1e6 if microwatts and microwatts > 0 else None
            cached = self._power_cap_w = (now, watts)
        return cached[1]


_NOT_READ = {
    field.name: None
    for field in dataclasses.fields(GpuReading)
    if field.default is dataclasses.MISSING
    and field.name not in ("index", "vendor", "name", "uuid", "bus_id", "state")
}
"""Every reading a lost card has no value for (those a ``GpuReading`` requires)."""
