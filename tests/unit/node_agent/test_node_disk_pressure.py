"""The hard watermark's check (disks/pressure.py) over a fake host: statvfs and the disks'
ext4 sysfs files are the test's own."""

import os
from types import SimpleNamespace

import pytest

from corral_node_agent.disks import pressure

MIB = 1024 * 1024
CLUSTER = 4096


def outgrowing() -> int:
    """The disks' limit in the tests that check every time: more than any room."""
    return 1 << 60


class FakeHost:
    """The host's free space and two loop-mounted disks (loop1, loop2) of 1 GiB each."""

    def __init__(self, tmp_path, monkeypatch):
        self.tmp = tmp_path
        self.free_bytes = 10 * 1024 * MIB
        self.disks = {"loop1": {"blocks": 262_144, "bfree": 262_000}, "loop2": {"blocks": 262_144, "bfree": 262_000}}
        self.trimmed: list[str] = []
        self._fds: dict[int, str] = {}
        for name in self.disks:
            (tmp_path / "sysfs" / name).mkdir(parents=True)
            self.write(name, "reserved_clusters", 4096)
            self.write(name, "delayed_allocation_blocks", 0)
        monkeypatch.setattr(pressure, "EXT4_SYSFS", str(tmp_path / "sysfs"))
        monkeypatch.setattr(pressure, "loop_device", lambda d: self._fds[d.fd])
        monkeypatch.setattr(pressure, "kernel_reserve", lambda image: 4096)
        monkeypatch.setattr(pressure, "trim", lambda fd: self.trimmed.append(self._fds[fd]))
        monkeypatch.setattr(pressure.os, "fstatvfs", self._fstatvfs)
        monkeypatch.setattr(pressure.DiskPressure, "host_free_bytes", lambda _: self.free_bytes)

    def write(self, name: str, attr: str, value: int) -> None:
        (self.tmp / "sysfs" / name / attr).write_text(f"{value}\n")

    def reserved(self, name: str) -> int:
        return int((self.tmp / "sysfs" / name / "reserved_clusters").read_text())

    def _fstatvfs(self, fd: int):
        d = self.disks[self._fds[fd]]
        return SimpleNamespace(f_blocks=d["blocks"], f_bfree=d["bfree"], f_frsize=CLUSTER)

    def open_disks(self) -> list[pressure.OpenDisk]:
        out = []
        for name in self.disks:
            fd = os.open(self.tmp, os.O_RDONLY | os.O_DIRECTORY)
            self._fds[fd] = name
            out.append(pressure.OpenDisk(fd, f"/images/{name}.img"))
        return out


@pytest.fixture
def host(tmp_path, monkeypatch) -> FakeHost:
    return FakeHost(tmp_path, monkeypatch)


def test_with_room_to_spare_the_disks_keep_the_kernels_reservation(host):
    guard = pressure.DiskPressure("/state", 1024, host.open_disks, outgrowing)
    guard.check(host.open_disks())
    assert host.reserved("loop1") == host.reserved("loop2") == 4096
    assert not guard.restricting()


def test_short_of_room_the_disks_share_what_is_left_above_the_hard_watermark(host):
    guard = pressure.DiskPressure("/state", 1024, host.open_disks, outgrowing)  # hard watermark: 512 MiB
    host.free_bytes = 612 * MIB
    guard.check(host.open_disks())
    assert guard.restricting()
    for name in ("loop1", "loop2"):  # 100 MiB above it, 50 each
        assert host.disks[name]["bfree"] - host.reserved(name) == 50 * MIB // CLUSTER
    # loop1 writes 40 MiB: at the next check it gets most of what is left (60 MiB)
    host.disks["loop1"]["bfree"] -= 40 * MIB // CLUSTER
    host.free_bytes -= 40 * MIB
    guard.check(host.open_disks())
    assert host.disks["loop1"]["bfree"] - host.reserved("loop1") == 45 * MIB // CLUSTER
    assert host.disks["loop2"]["bfree"] - host.reserved("loop2") == 15 * MIB // CLUSTER
    # below the hard watermark: nothing more for anyone
    host.free_bytes = 500 * MIB
    guard.check(host.open_disks())
    assert all(host.reserved(n) == host.disks[n]["bfree"] for n in ("loop1", "loop2"))


def test_dirty_pages_count_against_the_room(host):
    guard = pressure.DiskPressure("/state", 1024, host.open_disks, outgrowing)
    host.free_bytes = 612 * MIB
    host.write("loop1", "delayed_allocation_blocks", 80 * MIB // CLUSTER)
    guard.check(host.open_disks())
    assert host.disks["loop2"]["bfree"] - host.reserved("loop2") == 10 * MIB // CLUSTER


def test_a_disk_that_freed_space_is_trimmed_and_room_restores_the_kernels_reservation(host):
    guard = pressure.DiskPressure("/state", 1024, host.open_disks, outgrowing)
    host.free_bytes = 600 * MIB
    guard.check(host.open_disks())
    assert host.trimmed == []
    host.disks["loop2"]["bfree"] += 1000  # a file deleted
    guard.check(host.open_disks())
    assert host.trimmed == ["loop2"]
    host.free_bytes = 10 * 1024 * MIB  # the trim gave the host its blocks back
    guard.check(host.open_disks())
    assert host.reserved("loop1") == host.reserved("loop2") == 4096
    assert not guard.restricting()


def test_a_disk_gone_between_two_checks_is_forgotten_and_descriptors_are_closed(host):
    guard = pressure.DiskPressure("/state", 1024, host.open_disks, outgrowing)
    host.free_bytes = 600 * MIB
    disks = host.open_disks()
    guard.check(disks)
    for d in disks:
        with pytest.raises(OSError):
            os.fstat(d.fd)
    del host.disks["loop2"]
    guard.check(host.open_disks())
    assert guard.restricting() and [name for name, _ in guard._seen] == ["loop1"]


def test_agents_sharing_the_host_split_the_room_by_their_share(host):
    guard = pressure.DiskPressure("/state", 1024, host.open_disks, outgrowing, share=0.5)
    host.free_bytes = 712 * MIB  # 200 MiB above the hard watermark: 100 for this agent, 50 a disk
    guard.check(host.open_disks())
    assert all(host.disks[n]["bfree"] - host.reserved(n) == 50 * MIB // CLUSTER for n in ("loop1", "loop2"))


def test_no_check_is_needed_while_the_disks_whole_sizes_fit_in_the_room(host):
    limit = {"bytes": 2 * 1024 * MIB}
    guard = pressure.DiskPressure("/state", 1024, host.open_disks, lambda: limit["bytes"])
    host.free_bytes = 512 * MIB + 2 * 1024 * MIB
    assert guard.needed()  # once at start, whatever the room (a previous run's reservations)
    guard.check(host.open_disks())
    assert not guard.needed()
    limit["bytes"] += MIB  # one more sandbox: they could outgrow the room
    assert guard.needed()
    host.free_bytes = 600 * MIB
    guard.check(host.open_disks())
    assert guard.restricting()
    host.free_bytes = 10 * 1024 * MIB
    assert guard.needed()  # held back: the next check must give the kernel's reservation back
    guard.check(host.open_disks())
    assert not guard.restricting() and not guard.needed()
