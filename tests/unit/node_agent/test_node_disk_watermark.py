"""The disk watermark: thin disks are placed by their requests, and the host's real free space
above the watermark bounds what a node advertises."""

import os

import pytest

from corral_node_agent.capacity import disk


def test_advertised_disk_is_capacity_cut_to_the_room_above_the_watermark():
    assert disk.advertised_disk_mb(10_000, used_mb=400, room=100_000) == 10_000  # capacity binds
    assert disk.advertised_disk_mb(10_000, used_mb=400, room=600) == 1000  # room binds: 600 free to place
    assert disk.advertised_disk_mb(10_000, used_mb=400, room=0) == 400  # at the watermark: nothing free
    assert disk.advertised_disk_mb(10_000, used_mb=400, room=-5000) == 400  # below it: nothing, never negative
    assert disk.advertised_disk_mb(10_000, used_mb=0, room=-1) == 0


def test_room_is_free_space_less_the_reserve(tmp_path):
    st = os.statvfs(tmp_path)
    free_mb = st.f_bavail * st.f_frsize // disk.MIB
    # (the filesystem is shared: other writers may move it by a little between the two reads)
    assert abs(disk.room_mb(str(tmp_path), 0) - free_mb) < 64
    assert abs(disk.room_mb(str(tmp_path / "not" / "made" / "yet"), 100) - (free_mb - 100)) < 64
    assert disk.room_mb(str(tmp_path), free_mb + 10_000) < 0
    # agents sharing the host (and this filesystem) split the room like cpu and memory
    assert abs(disk.room_mb(str(tmp_path), 0, share=0.25) - free_mb // 4) < 64
    assert disk.room_mb(str(tmp_path), free_mb + 10_000, share=0.25) < -9000  # past the watermark: not shared


def test_the_default_reserve_is_a_twentieth_of_the_filesystem_at_least_a_gib(tmp_path):
    st = os.statvfs(tmp_path)
    assert disk.default_free_reserve_mb(str(tmp_path)) == max(1024, st.f_blocks * st.f_frsize // 20 // disk.MIB)


# ---- the hard watermark: what the running sandboxes may still write ------------------------

GIB_CLUSTERS = 262_144  # 1 GiB in 4 KiB clusters
MIB_BYTES = 1024 * 1024


def _disk(free=GIB_CLUSTERS, default=4096, pending=0, grew=0) -> disk.DiskGrowth:
    return disk.DiskGrowth(free=free, default_reserve=default, pending=pending, grew=grew)


def _allowances(room_bytes, disks) -> list[int]:
    """Clusters each disk may still take under its reservation."""
    return [max(0, d.free - r) for d, r in zip(disks, disk.reservations(room_bytes, disks), strict=True)]


def test_the_hard_watermark_is_half_the_reserve():
    assert disk.hard_reserve_mb(1024) == 512
    assert disk.hard_reserve_mb(0) == 0


def test_idle_disks_split_the_room_evenly():
    disks = [_disk(), _disk()]
    assert _allowances(100 * MIB_BYTES, disks) == [50 * 256, 50 * 256]


def test_the_disks_that_grew_get_most_of_the_room_and_an_idle_one_keeps_its_even_part():
    writer, idle = _disk(grew=1000), _disk(grew=0)
    a_writer, a_idle = _allowances(100 * MIB_BYTES, [writer, idle])
    assert a_writer == 75 * 256 and a_idle == 25 * 256


def test_dirty_pages_not_yet_on_the_host_come_out_of_the_room():
    disks = [_disk(pending=20 * 256), _disk()]
    assert _allowances(100 * MIB_BYTES, disks) == [40 * 256, 40 * 256]
    # more pending than room: nothing more for anyone
    assert _allowances(100 * MIB_BYTES, [_disk(pending=200 * 256), _disk()]) == [0, 0]


def test_no_room_reserves_all_free_space_and_never_less_than_the_kernels_own():
    disks = [_disk(free=10_000), _disk(free=3000, default=4096)]
    assert disk.reservations(-5 * MIB_BYTES, disks) == [10_000, 4096]  # a room below zero is none


def test_a_disk_whose_free_space_is_within_its_allowance_keeps_the_kernels_reservation():
    assert disk.reservations(100 * 1024 * MIB_BYTES, [_disk(), _disk()]) == [4096, 4096]


def test_together_the_disks_never_get_more_than_the_room():
    import random

    rng = random.Random(7)
    for _ in range(500):
        disks = [_disk(free=rng.randrange(5000, 3 * GIB_CLUSTERS), default=rng.randrange(0, 4097),
                       pending=rng.randrange(0, 5000), grew=rng.choice([0, rng.randrange(0, 10**6)]))
                 for _ in range(rng.randrange(1, 40))]
        room = rng.randrange(-100, 4096) * MIB_BYTES
        reserved = disk.reservations(room, disks)
        # what they may take beyond what the kernel's own reserve already holds back
        taken = sum(max(0, d.free - r) for d, r in zip(disks, reserved, strict=True)) * 4096
        assert taken <= max(0, room - sum(d.pending for d in disks) * 4096)
        assert all(r >= d.default_reserve for d, r in zip(disks, reserved, strict=True))


def test_a_preallocated_disk_never_takes_the_host_below_the_hard_watermark(tmp_path, monkeypatch):
    from corral_node_agent.disks.upper import UpperDisks
    from corral_node_agent.errors import Unavailable

    src = tmp_path / "template.img"
    src.write_bytes(b"\0" * 4096)
    os.truncate(src, 64 * disk.MIB)
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    # room for the image, but not for it and the hard watermark
    disks = UpperDisks(str(tmp_path / "disks"), preallocate=True, keep_free_bytes=free - 32 * disk.MIB)
    with pytest.raises(Unavailable, match="disk is full"):
        disks.copy(str(src), str(tmp_path / "upper.img"))
    assert not (tmp_path / "upper.img").exists()
    UpperDisks(str(tmp_path / "disks"), preallocate=True, keep_free_bytes=0).copy(str(src), str(tmp_path / "ok.img"))
    assert os.stat(tmp_path / "ok.img").st_blocks * 512 >= 64 * disk.MIB  # preallocated


def test_vm_disks_are_preallocated_whatever_the_setting(tmp_path, monkeypatch):
    """A guest's ext4 is out of the host's reach: nothing could hold a thin VM disk back."""
    from corral_node_agent.backends.vm.backend import FullVmBackend
    from corral_node_agent.settings import NodeAgentSettings

    settings = NodeAgentSettings(node_id="n1", state_dir=str(tmp_path / "state"), vm_accelerator="tcg",
                                 disk_preallocate=False, disk_free_reserve_mb=2048)
    backend = FullVmBackend(settings)
    assert backend.disks.preallocate and backend.disks.keep_free_bytes == 1024 * disk.MIB
