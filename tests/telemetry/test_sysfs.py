"""Whether a root is a real sysfs, read from a mount table as the kernel writes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputui.telemetry.sysfs import MOUNTINFO, on_sysfs

MOUNTS = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
23 22 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw
24 23 0:22 / /sys/fs/cgroup rw,nosuid shared:3 - cgroup2 cgroup2 rw
30 22 0:21 / {host} rw,relatime shared:2 - sysfs sysfs rw
31 22 0:40 / {copy} rw,relatime - tmpfs tmpfs rw
32 31 0:21 / {copy} rw,relatime - sysfs sysfs rw
33 22 0:41 / {spaced} rw,relatime - sysfs sysfs rw
"""


def test_the_deepest_last_mount_over_a_path_says_its_type(tmp_path: Path) -> None:
    host, copy, spaced = tmp_path / "host" / "sys", tmp_path / "copy", tmp_path / "a b"
    for folder in (host, copy, spaced, tmp_path / "plain"):
        (folder / "class" / "drm").mkdir(parents=True)
    mountinfo = tmp_path / "mountinfo"
    escaped = str(spaced).replace(" ", "\\040")
    mountinfo.write_text(MOUNTS.format(host=host, copy=copy, spaced=escaped))

    assert on_sysfs(Path("/sys/class/drm"), mountinfo)
    assert not on_sysfs(Path("/sys/fs/cgroup"), mountinfo)  # a mount inside /sys
    assert on_sysfs(host, mountinfo) and on_sysfs(host / "class" / "drm", mountinfo)
    assert on_sysfs(copy, mountinfo)  # mounted over: the last mount there counts
    assert on_sysfs(spaced, mountinfo)
    assert not on_sysfs(tmp_path / "plain", mountinfo)
    assert not on_sysfs(tmp_path / "hostile", mountinfo)  # /host is no prefix of /hostile
    assert not on_sysfs(Path("/sys"), tmp_path / "no-such-mountinfo")


def test_this_machines_sys_is_sysfs_and_a_temporary_tree_is_not(tmp_path: Path) -> None:
    mounts = [line.split() for line in MOUNTINFO.read_text().splitlines()]
    if not any(fields[4] == "/sys" and "sysfs" in fields[5:] for fields in mounts):
        pytest.skip("no sysfs mounted at /sys here")
    assert on_sysfs(Path("/sys/class"))
    assert not on_sysfs(tmp_path)
