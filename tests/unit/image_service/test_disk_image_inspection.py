"""The decision rules of inspect_disk_image, over canned `qemu-img info` answers.

A stand-in qemu-img prints a given JSON, so the rules for cases hard to build for real here
(encrypted, corrupt, a failing or garbled qemu-img) are covered; the integration tests run
the real qemu-img on real images.
"""

import json
import stat
from pathlib import Path

import pytest

from corral_common.disk_images import DiskImageRefused, inspect_disk_image

QCOW2 = {"format": "qcow2", "virtual-size": 1 << 30,
         "format-specific": {"type": "qcow2", "data": {"compat": "1.1", "corrupt": False}}}


def fake_qemu_img(tmp_path: Path, stdout: str, rc: int = 0, stderr: str = "") -> str:
    (tmp_path / "out.json").write_text(stdout)
    script = tmp_path / "qemu-img"
    script.write_text(f"#!/bin/sh\ncat {tmp_path / 'out.json'}\necho '{stderr}' >&2\nexit {rc}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_self_contained_qcow2_is_accepted(tmp_path):
    info = inspect_disk_image("img", "qcow2", qemu_img=fake_qemu_img(tmp_path, json.dumps(QCOW2)))
    assert (info.format, info.virtual_size) == ("qcow2", 1 << 30)


@pytest.mark.parametrize("answer,code", [
    ({**QCOW2, "backing-filename": "/etc/shadow"}, "disk_image_backing_file"),
    ({**QCOW2, "full-backing-filename": "json:{\"file\": {\"filename\": \"/etc/shadow\"}}"}, "disk_image_backing_file"),
    ({**QCOW2, "format-specific": {"data": {"data-file": "/dev/sda"}}}, "disk_image_data_file"),
    ({**QCOW2, "format-specific": {"data": {"encrypt": {"format": "luks"}}}}, "disk_image_encrypted"),
    ({**QCOW2, "format-specific": {"data": {"corrupt": True}}}, "invalid_disk_image"),
    ({"format": "vmdk", "virtual-size": 1}, "disk_format_mismatch"),
    ({"format": "qcow2"}, "invalid_disk_image"),
])
def test_refusals(tmp_path, answer, code):
    with pytest.raises(DiskImageRefused) as exc:
        inspect_disk_image("img", "qcow2", qemu_img=fake_qemu_img(tmp_path, json.dumps(answer)))
    assert exc.value.code == code


def test_qemu_img_failure_and_unknown_format(tmp_path):
    failing = fake_qemu_img(tmp_path, "", rc=1, stderr="Image is not in qcow2 format")
    with pytest.raises(DiskImageRefused, match="not in qcow2 format") as exc:
        inspect_disk_image("img", "qcow2", qemu_img=failing)
    assert exc.value.code == "invalid_disk_image"
    with pytest.raises(DiskImageRefused) as exc:
        inspect_disk_image("img", "vmdk", qemu_img=failing)
    assert exc.value.code == "invalid_disk_format"
