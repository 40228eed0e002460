"""The disk watermark: thin disks are placed by their requests, and the host's real free space
above the watermark bounds what a node advertises."""

import os

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


def test_the_default_reserve_is_a_twentieth_of_the_filesystem_at_least_a_gib(tmp_path):
    st = os.statvfs(tmp_path)
    assert disk.default_free_reserve_mb(str(tmp_path)) == max(1024, st.f_blocks * st.f_frsize // 20 // disk.MIB)
