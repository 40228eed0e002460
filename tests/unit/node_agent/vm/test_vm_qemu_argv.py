"""QEMU command lines and input translation for the VM backends (no QEMU is started)."""

import dataclasses

import pytest

from corral_common.contracts.display import KeyPress, MouseClick, MouseMove, TypeText
from corral_node_agent.backends.vm.input import ABS_MAX, char_qcodes, to_qmp
from corral_node_agent.backends.vm.qemu import (
    PMEM_ALIGN,
    TCG_TB_SIZE_MB,
    LayerDisk,
    MachineConfig,
    build_argv,
    detect_accelerator,
    guest_lowers,
)
from corral_node_agent.errors import BadInput


def _config(machine, tmp_path, **kw):
    return MachineConfig(machine=machine, memory_mb=256, cpus=2, accelerator="tcg",
                         qmp_socket=str(tmp_path / "qmp"), console_socket=str(tmp_path / "con"), **kw)


def _opt(argv, flag):
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_microvm_has_no_network_and_attaches_layers_read_only(tmp_path):
    base, top = tmp_path / "base.erofs", tmp_path / "top.erofs"
    base.write_bytes(b"x" * 4096)
    top.write_bytes(b"y" * 4096)
    cfg = _config("microvm", tmp_path, kernel="k", initramfs="i", cmdline="c", agent_socket=str(tmp_path / "a"),
                  layers=[LayerDisk(str(base)), LayerDisk(str(top))])
    argv = build_argv("qemu", cfg)
    assert "-nodefaults" in argv and not _opt(argv, "-netdev") and not _opt(argv, "-nic")
    assert _opt(argv, "-M")[0].startswith("microvm,rtc=on")
    assert _opt(argv, "-accel") == ["tcg,tb-size=32"]
    drives = _opt(argv, "-drive")
    assert all("readonly=on" in d for d in drives) and len(drives) == 2
    assert f"file={base}" in drives[0]
    assert "virtio-blk-device,drive=l0,serial=l0" in _opt(argv, "-device")
    assert "spawn=deny" in _opt(argv, "-sandbox")[0]
    assert guest_lowers(cfg.layers) == ["vd:l0", "vd:l1"]


def test_an_idle_vms_memory_defaults_are_on_the_command_line(tmp_path):
    """What keeps an idle VM small on the host, by default: a 32 MiB TCG code buffer (a boot
    fills 64 MiB's worth, all of it resident for the VM's life), a balloon with free page
    reporting (freed guest pages go back), and guest RAM KSM may merge."""
    cfg = _config("microvm", tmp_path, kernel="k", cmdline="c")
    argv = build_argv("qemu", cfg)
    assert _opt(argv, "-accel") == [f"tcg,tb-size={TCG_TB_SIZE_MB}"] and TCG_TB_SIZE_MB <= 32
    assert "free-page-reporting=on" in _opt(argv, "-device")[-1]
    assert "mem-merge=off" not in _opt(argv, "-M")[0]
    # Under KVM there is no code buffer; with None QEMU picks its own size.
    kvm = build_argv("qemu", dataclasses.replace(cfg, accelerator="kvm"))
    assert _opt(kvm, "-accel") == ["kvm"]
    assert _opt(build_argv("qemu", _config("microvm", tmp_path, tcg_tb_size_mb=None)), "-accel") == ["tcg"]


def test_the_upper_disk_is_the_one_writable_drive(tmp_path):
    layer = tmp_path / "base.erofs"
    layer.write_bytes(b"x" * 4096)
    for machine, bus in (("microvm", "device"), ("q35", "pci")):
        cfg = _config(machine, tmp_path, kernel="k", cmdline="c", layers=[LayerDisk(str(layer))],
                      upper_disk=str(tmp_path / "upper.img"))
        argv = build_argv("qemu", cfg, upper_fds=(17, 18))
        writable = [d for d in _opt(argv, "-drive") if "readonly=on" not in d]
        assert writable == [
            "file=/dev/fdset/1,format=raw,if=none,id=upper,cache.direct=on,discard=ignore,file.locking=off"]
        assert _opt(argv, "-add-fd") == ["fd=17,set=1", "fd=18,set=1"]  # the image, opened by QemuMachine.launch
        assert f"virtio-blk-{bus},drive=upper,serial=upper" in _opt(argv, "-device")


def test_q35_maps_layers_with_pmem_padded_to_2mib(tmp_path):
    layer = tmp_path / "base.erofs"
    layer.write_bytes(b"x" * (PMEM_ALIGN + 1))
    cfg = _config("q35", tmp_path, kernel="k", cmdline="c", layers=[LayerDisk(str(layer), "pmem")], display=True)
    argv = build_argv("qemu", cfg)
    backend = _opt(argv, "-object")[0]
    assert "readonly=on" in backend and "share=on" in backend and f"size={2 * PMEM_ALIGN}" in backend
    assert _opt(argv, "-m")[0].startswith("256M,slots=1,maxmem=")
    assert "-vga" in argv
    assert guest_lowers(cfg.layers) == ["pmem0"]


def test_pmem_and_disk_images_need_q35(tmp_path):
    layer = tmp_path / "l"
    layer.write_bytes(b"x")
    with pytest.raises(ValueError, match="q35"):
        build_argv("qemu", _config("microvm", tmp_path, layers=[LayerDisk(str(layer), "pmem")]))
    with pytest.raises(ValueError, match="q35"):
        build_argv("qemu", _config("microvm", tmp_path, boot_disk="d.qcow2"))


def test_explicit_accelerator_preference_wins():
    assert detect_accelerator("tcg") == "tcg"
    assert detect_accelerator("kvm") == "kvm"
    assert detect_accelerator("auto") in ("kvm", "tcg")


def test_typing_text_presses_shift_for_capitals_and_symbols():
    assert char_qcodes("a") == ["a"]
    assert char_qcodes("A") == ["shift", "a"]
    assert char_qcodes("!") == ["shift", "1"]
    assert char_qcodes("\n") == ["ret"]
    with pytest.raises(BadInput):
        char_qcodes("é")


def test_input_batches_keep_chords_together_and_scale_the_pointer():
    batches = to_qmp([KeyPress(keys=["ctrl", "c"]), TypeText(text="Hi"), MouseMove(x=1023, y=0),
                      MouseClick(x=0, y=767, button="right")], (1024, 768))
    chord = batches[0]
    assert [e["data"]["down"] for e in chord] == [True, True, False, False]
    assert [e["data"]["key"]["data"] for e in chord] == ["ctrl", "c", "c", "ctrl"]
    assert len(batches) == 1 + 2 + 1 + 1  # one batch per typed character
    move = batches[3]
    assert move[0]["data"] == {"axis": "x", "value": ABS_MAX} and move[1]["data"]["value"] == 0
    click = batches[4]
    assert click[1]["data"]["value"] == ABS_MAX
    assert [e["data"].get("button") for e in click[2:]] == ["right", "right"]
