"""The cgroup drivers' pure parts on a fake hierarchy (tmp_path): which driver a mount table
gets, where v2 puts the node's tree (the root, or a delegated cgroup), the values it writes, the
order it hands controllers down in and the "no internal processes" move. The kernel's side of
cgroup.subtree_control and cgroup.procs is played by `FakeKernel`; the real v2 hierarchy is
driven in a microVM (tests/integration/node_agent/vm/test_vm_cgroup_v2.py)."""

import errno
import os
from pathlib import Path

import pytest

from corral_host.cgroups import v2
from corral_host.cgroups.detect import cgroup_driver
from corral_host.cgroups.files import ControlFiles, flat_keyed
from corral_host.cgroups.v2 import AGENT_LEAF, V2Driver, own_cgroup, render_cpu_max

MIB = 1 << 20


def mountinfo(tmp_path: Path, *lines: str) -> str:
    path = tmp_path / "mountinfo"
    path.write_text("".join(f"{i + 20} 1 0:{i + 30} {line}\n" for i, line in enumerate(lines)))
    return str(path)


def unified(tmp_path: Path, own: str = "/") -> tuple[Path, V2Driver]:
    """A fake cgroup2 mount at tmp_path/cg (the root offers every controller) and a driver
    for a process in ``own``."""
    root = tmp_path / "cg"
    make_cgroup(root, "cpu io memory pids")
    (root / "cgroup.events").unlink()  # the true root has no cgroup.events
    (tmp_path / "self-cgroup").write_text(f"1:name=systemd:/x\n0::{own}\n")
    info = mountinfo(tmp_path, f"/ {root} rw,nosuid,nodev,noexec - cgroup2 cgroup2 rw,nsdelegate")
    return root, V2Driver(info, str(tmp_path / "self-cgroup"))


def make_cgroup(directory: Path, offered: str = "", procs: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    files = {"cgroup.controllers": offered, "cgroup.subtree_control": "", "cgroup.procs": procs,
             "cgroup.events": "populated 0\nfrozen 0\n"}
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


class FakeKernel:
    """cgroup.subtree_control and cgroup.procs as the kernel treats writes to them (directories
    the driver makes get the control files of a cgroup); every write is recorded."""

    THREADED = ("cpu", "pids")

    def __init__(self, root: Path, monkeypatch):
        self.root = root
        self.writes: list[tuple[str, str]] = []
        real_mkdir = Path.mkdir

        def mkdir(path: Path, *args, **kwargs):
            fresh = not path.exists()
            real_mkdir(path, *args, **kwargs)
            if fresh and (path.parent / "cgroup.subtree_control").exists():
                make_cgroup(path, (path.parent / "cgroup.subtree_control").read_text())

        monkeypatch.setattr(Path, "mkdir", mkdir)
        monkeypatch.setattr(v2, "_write", self.write)

    def write(self, path, value) -> None:
        path, value = Path(path), str(value)
        self.writes.append((str(path.relative_to(self.root)), value))
        if path.name == "cgroup.subtree_control":
            controller = value.removeprefix("+")
            if controller not in (path.parent / "cgroup.controllers").read_text().split():
                raise OSError(errno.EINVAL, "not offered", str(path))
            is_root = not (path.parent / "cgroup.events").exists()
            thread_root = path.parent / "thread-root"  # (a marker of the fake's own)
            if not is_root and (path.parent / "cgroup.procs").read_text().split():
                if controller not in self.THREADED:
                    raise OSError(errno.EBUSY, "no internal processes", str(path))
                thread_root.touch()  # the kernel lets threaded controllers through, and then...
            if thread_root.exists() and controller not in self.THREADED:
                raise OSError(errno.EOPNOTSUPP, "domain controllers in a thread root", str(path))
            enabled = path.read_text().split()
            path.write_text(" ".join([*enabled, controller]))
        elif path.name == "cgroup.procs":
            for procs in self.root.rglob("cgroup.procs"):
                procs.write_text(" ".join(p for p in procs.read_text().split() if p != value))
            path.write_text(" ".join([*path.read_text().split(), value]))
        else:
            path.write_text(value)


# ---- which driver ----------------------------------------------------------------------------


def test_a_hybrid_host_is_v1_and_a_unified_one_v2(tmp_path):
    hybrid = mountinfo(tmp_path, "/ /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory",
                       "/ /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids",
                       "/ /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate")
    assert cgroup_driver(hybrid).name == "v1"
    plain_v1 = mountinfo(tmp_path, "/ /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory")
    assert cgroup_driver(plain_v1).name == "v1"
    # only systemd's named v1 hierarchy left next to cgroup2: the controllers are on v2
    only_named = mountinfo(tmp_path, "/ /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd",
                           "/ /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate")
    driver = cgroup_driver(only_named)
    assert driver.name == "v2" and driver.mount == "/sys/fs/cgroup"


def test_own_cgroup_is_the_unified_line(tmp_path):
    f = tmp_path / "cgroup"
    f.write_text("12:memory:/user.slice\n1:name=systemd:/user.slice/u.scope\n0::/user.slice/u.scope\n")
    assert own_cgroup(str(f)) == "/user.slice/u.scope"
    f.write_text("12:memory:/\n")
    assert own_cgroup(str(f)) is None


# ---- where -----------------------------------------------------------------------------------


def test_the_node_tree_starts_at_the_root_when_nothing_is_delegated(tmp_path):
    root, driver = unified(tmp_path, own="/system.slice/corral-node-agent.service")
    make_cgroup(root / "system.slice" / "corral-node-agent.service", "memory pids")
    assert driver.base == "/"
    group = driver.cgroup("corral/n1/sb-1/")
    assert group.path == "/corral/n1/sb-1" and group.runtime_path == "/corral/n1/sb-1"
    assert group.dir == root / "corral" / "n1" / "sb-1"
    assert driver.directory("/") == root


def test_the_node_tree_starts_at_the_nearest_delegated_cgroup(tmp_path):
    service = "/system.slice/corral-node-agent.service"
    root, _ = unified(tmp_path)
    make_cgroup(root / service.strip("/"), "memory pids")
    make_cgroup(root / service.strip("/") / AGENT_LEAF, "")
    os.setxattr(root / service.strip("/"), "user.delegate", b"1")
    # the agent, or its successor that already moved to the leaf, finds the same base
    for own in (service, f"{service}/{AGENT_LEAF}"):
        (tmp_path / "self-cgroup").write_text(f"0::{own}\n")
        driver = V2Driver(str(tmp_path / "mountinfo"), str(tmp_path / "self-cgroup"))
        assert driver.base == service
        group = driver.cgroup("/corral/n1/sb-1")
        assert group.runtime_path == f"{service}/corral/n1/sb-1"  # what crun is given
        assert group.dir == root / service.strip("/") / "corral" / "n1" / "sb-1"


def test_no_hierarchy_no_cgroups(tmp_path):
    driver = V2Driver(mountinfo(tmp_path, "/ /proc rw - proc proc rw"), str(tmp_path / "missing"))
    assert not driver.available()
    with pytest.raises(FileNotFoundError):
        driver.cgroup("/corral/n1").create()


# ---- controllers and the "no internal processes" rule -----------------------------------------


def test_create_hands_the_controllers_down_from_the_root(tmp_path, monkeypatch):
    root, driver = unified(tmp_path)
    (root / "cgroup.procs").write_text("1 77")  # the root may hold processes
    kernel = FakeKernel(root, monkeypatch)
    driver.cgroup("/corral/n1/sb-1").create()
    enables = [(path, value) for path, value in kernel.writes if path.endswith("subtree_control")]
    assert enables == [(f"{d}cgroup.subtree_control", f"+{c}")
                       for d in ("", "corral/", "corral/n1/") for c in ("cpu", "io", "memory", "pids")]
    assert (root / "corral/n1/sb-1/cgroup.controllers").read_text().split() == ["cpu", "io", "memory", "pids"]
    assert (root / "cgroup.procs").read_text().split() == ["1", "77"]  # the root is exempt: nobody moved
    kernel.writes.clear()
    driver.cgroup("/corral/n1/sb-2").create()  # already handed down: nothing written again
    assert kernel.writes == []


def test_a_delegated_base_holding_the_agent_moves_it_to_a_leaf_first(tmp_path, monkeypatch):
    service = "system.slice/corral-node-agent.service"
    root, _ = unified(tmp_path)
    make_cgroup(root / "system.slice", "memory pids")
    make_cgroup(root / service, "cpu memory pids", procs="4242 4243")  # what systemd delegated
    os.setxattr(root / service, "trusted.delegate", b"1")
    (tmp_path / "self-cgroup").write_text(f"0::/{service}\n")
    driver = V2Driver(str(tmp_path / "mountinfo"), str(tmp_path / "self-cgroup"))
    FakeKernel(root, monkeypatch)
    monkeypatch.setattr(v2.os, "geteuid", lambda: 0)
    assert driver.available()
    driver.cgroup("/corral/n1").create()
    assert (root / service / "cgroup.procs").read_text().split() == []
    assert (root / service / AGENT_LEAF / "cgroup.procs").read_text().split() == ["4242", "4243"]
    assert (root / service / "cgroup.subtree_control").read_text().split() == ["cpu", "memory", "pids"]
    assert not (root / service / "thread-root").exists()  # moved before cpu was enabled
    assert (root / service / "corral/n1").is_dir()


def test_a_required_controller_the_base_is_not_given_fails_create(tmp_path, monkeypatch):
    service = "system.slice/x.service"
    root, _ = unified(tmp_path)
    make_cgroup(root / service, "memory")  # no pids delegated
    os.setxattr(root / service, "user.delegate", b"1")
    (tmp_path / "self-cgroup").write_text(f"0::/{service}/{AGENT_LEAF}\n")
    driver = V2Driver(str(tmp_path / "mountinfo"), str(tmp_path / "self-cgroup"))
    FakeKernel(root, monkeypatch)
    monkeypatch.setattr(v2.os, "geteuid", lambda: 0)
    assert not driver.available()
    with pytest.raises(OSError, match="pids"):
        driver.cgroup("/corral/n1").create()


# ---- values ----------------------------------------------------------------------------------


def test_cpu_max_rendering():
    assert render_cpu_max(0.5) == "50000 100000"
    assert render_cpu_max(2) == "200000 100000"
    assert render_cpu_max(0.0001) == "1000 100000"  # the kernel's minimum quota
    assert render_cpu_max(None) == "max 100000"


def _leaf(root: Path, name: str = "corral/n1/sb-1", current: int = 0) -> Path:
    leaf = make_cgroup(root / name, "cpu memory pids")
    # (empty limit files: the driver pwrites at offset 0, which a regular file does not truncate)
    for f, text in {"memory.max": "", "memory.swap.max": "", "pids.max": "", "cpu.max": "",
                    "cpu.max.burst": "", "memory.current": str(current), "memory.reclaim": ""}.items():
        (leaf / f).write_text(text)
    return leaf


def test_limits_land_in_the_v2_files(tmp_path, monkeypatch):
    root, driver = unified(tmp_path)
    leaf = _leaf(root)
    FakeKernel(root, monkeypatch)
    group = driver.cgroup("/corral/n1/sb-1")
    group.set_limits(64 * MIB, 32, cpu=1.5)
    read = {f: (leaf / f).read_text() for f in ("memory.max", "memory.swap.max", "pids.max", "cpu.max")}
    assert read == {"memory.max": str(64 * MIB), "memory.swap.max": "0", "pids.max": "32", "cpu.max": "150000 100000"}
    assert (leaf / "cpu.max.burst").read_text() == "150000"  # one period's quota may be banked
    group.set_limits(64 * MIB, 32)  # cpu lifted again
    assert (leaf / "cpu.max").read_text().startswith("max 100000")
    assert (leaf / "cpu.max.burst").read_text().startswith("0")
    assert group.procs_files() == [str(leaf / "cgroup.procs")]


def test_a_memory_cap_below_what_is_in_use_is_refused_after_reclaim(tmp_path, monkeypatch):
    root, driver = unified(tmp_path)
    leaf = _leaf(root, current=48 * MIB)
    kernel = FakeKernel(root, monkeypatch)
    group = driver.cgroup("/corral/n1/sb-1")
    group.set_limits(96 * MIB, 32)
    with pytest.raises(OSError) as exc:
        group.set_limits(16 * MIB, 32)
    assert exc.value.errno == errno.EBUSY
    assert ("corral/n1/sb-1/memory.reclaim", str(32 * MIB)) in kernel.writes  # the difference was asked back
    assert (leaf / "memory.max").read_text() == str(96 * MIB)  # the old cap stays


def test_control_files_are_kept_open_and_limits_written_once(tmp_path):
    f = tmp_path / "pids.max"
    f.write_text("max")
    files = ControlFiles(keep=True)
    assert files.set_limit(str(f), 8) and f.read_text().startswith("8")  # pwrite at 0 (kernfs ignores the rest)
    assert not files.set_limit(str(f), 8)  # unchanged: not written again
    assert files.counter(str(f), "missing") == 0
    files.close()
    assert flat_keyed("usage_usec 12\nuser_usec 7\nbad x\n") == {"usage_usec": 12, "user_usec": 7}


def test_per_sandbox_control_files_hold_no_descriptor_between_calls(tmp_path):
    # A node keeps one cgroup per sandbox: a descriptor kept per file would count against
    # the agent's RLIMIT_NOFILE once per sandbox (host.FDS_PER_SANDBOX).
    import os

    f = tmp_path / "memory.usage_in_bytes"
    f.write_text("4096")
    before = len(os.listdir("/proc/self/fd"))
    files = ControlFiles(keep=False)
    assert files.counter(str(f), "missing") == 0 and files.read(str(f)) == "4096"
    assert files.set_limit(str(f), 8) and f.read_text().startswith("8")  # at offset 0, as kernfs takes it
    assert not files.set_limit(str(f), 8)
    assert len(os.listdir("/proc/self/fd")) == before
    kept = ControlFiles(keep=True)
    kept.read(str(f))
    assert len(os.listdir("/proc/self/fd")) == before + 1
    kept.close()


def test_v2_memory_reading_is_current_less_inactive_file(tmp_path):
    root, driver = unified(tmp_path)
    leaf = _leaf(root, current=100 * MIB)
    (leaf / "memory.stat").write_text(f"anon {60 * MIB}\nfile {40 * MIB}\ninactive_file {30 * MIB}\n")
    (leaf / "memory.swap.current").write_text(str(5 * MIB))
    reading = driver.cgroup("/corral/n1/sb-1").memory_reading()
    assert (reading.usage_bytes, reading.working_set_bytes, reading.swap_bytes) == (100 * MIB, 70 * MIB, 5 * MIB)


def test_v1_memory_reading_is_usage_less_total_inactive_file(tmp_path):
    from corral_host.cgroups.v1 import V1Driver

    mem = tmp_path / "memory"
    leaf = mem / "corral/n1/sb-1"
    leaf.mkdir(parents=True)
    (leaf / "memory.usage_in_bytes").write_text(str(50 * MIB))
    # the sandbox's own inactive_file is 0 but its children's (total_) count: use total_
    (leaf / "memory.stat").write_text(f"inactive_file 0\ntotal_inactive_file {20 * MIB}\nswap 0\n"
                                      f"total_swap {3 * MIB}\n")
    info = mountinfo(tmp_path, f"/ {mem} rw - cgroup cgroup rw,memory")
    reading = V1Driver(info).cgroup("/corral/n1/sb-1").memory_reading()
    assert (reading.usage_bytes, reading.working_set_bytes, reading.swap_bytes) == (50 * MIB, 30 * MIB, 3 * MIB)


def test_keyed_value_finds_one_key_without_confusing_prefixes():
    from corral_host.cgroups.files import keyed_value

    text = "inactive_file 5\ntotal_inactive_file 7\nswap 1\ntotal_swap 9"
    assert keyed_value(text, "inactive_file") == 5
    assert keyed_value(text, "total_inactive_file") == 7
    assert keyed_value(text, "total_swap") == 9  # the last line, no newline after it
    assert keyed_value(text, "swap") == 1
    assert keyed_value(text, "active_file") == 0  # absent (only a suffix of other keys)
