"""The guest kit: the kernel and initramfs every Corral VM boots.

Built on the node from Debian packages (nothing binary is committed): the cloud kernel
package is fetched with `apt-get download`, the kernel and the few modules a sandbox needs
are kept, and an initramfs is packed with busybox-static, the guest agent (compiled here
from guest/agent.c) and guest/init.sh as /init. See docs/vm-guest-protocol.md.

The kit is cached in a directory keyed by the kernel package version and a hash of the
agent and init sources: building again is a no-op until one of them changes.
"""

import argparse
import fcntl
import gzip
import hashlib
import ipaddress
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from corral_node_agent.backends.vm.protocol import PROTOCOL_VERSION
from corral_node_agent.errors import GuestKitMissing

GUEST_DIR = Path(__file__).resolve().parent / "guest"
AGENT_SOURCE = GUEST_DIR / "agent.c"
INIT_SCRIPT = GUEST_DIR / "init.sh"
KERNEL_META_PACKAGE = "linux-image-cloud-amd64"
BUSYBOX = "/bin/busybox"  # from busybox-static
# Bump when the build steps change in a way the hashed sources do not show.
RECIPE_VERSION = 3
KIT_JSON = "kit.json"
# What a sandbox needs from the kernel's modules (dependencies are added from modules.dep),
# in groups that init loads only when the machine has a use for them: loading a module
# costs ~25 ms under TCG (signature check, relocation), most of init's time.
# core: the microvm's devices (virtio-mmio), the agent's port, disks, balloon, root fs.
# pci: q35's virtio devices. pmem: DAX layers. input: a display's tablet/keyboard.
# ext4, DAX, i8042/atkbd and the VGA console are built into Debian's cloud kernel.
MODULE_GROUPS: dict[str, tuple[str, ...]] = {
    "core": ("virtio_mmio", "virtio_console", "virtio_blk", "virtio_balloon", "erofs", "overlay"),
    "pci": ("virtio_pci",),
    "pmem": ("virtio_pmem", "nd_pmem"),
    "input": ("virtio_input", "evdev"),
    "net": ("virtio_net",),  # an egress allowlist's NIC (docs/network.md)
}
LZ4_LEGACY_MAGIC = b"\x02\x21\x4c\x18"
# TCG pitfalls (HOST-NOTES): without a fixed TSC frequency and loops-per-jiffy, ~20% of
# boots hang calibrating timers; swiotlb bounce buffers would defeat DAX on pmem.
TCG_CMDLINE = ("tsc_early_khz=2300000", "lpj=4600000")
_LOWER_RE = re.compile(r"^(pmem[0-9]+|vd:[A-Za-z0-9_.-]{1,20})$")
_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class GuestKitBuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class GuestKit:
    kernel: str
    initramfs: str
    kernel_version: str
    protocol_version: int
    # "pvh" (raw vmlinux, the faster boot) or "bzimage"
    kernel_format: str = "pvh"
    build_hash: str = ""
    # The bzImage, for VMs with a display: a PVH boot skips the real-mode setup that finds
    # the VGA text console, so tty1 would be a dummy console with nothing on the screen.
    display_kernel: str = ""

    @classmethod
    def load(cls, directory: str) -> "GuestKit":
        meta_path = Path(directory) / KIT_JSON
        try:
            meta = json.loads(meta_path.read_text())
            kit = cls(kernel=str(Path(directory) / meta["kernel"]), initramfs=str(Path(directory) / meta["initramfs"]),
                      kernel_version=meta["kernel_version"], protocol_version=int(meta["protocol_version"]),
                      kernel_format=meta.get("kernel_format", "pvh"), build_hash=meta.get("build_hash", ""),
                      display_kernel=str(Path(directory) / meta.get("display_kernel", meta["kernel"])))
        except (OSError, ValueError, KeyError) as exc:
            raise GuestKitMissing(
                f"no VM guest kit in {directory} ({exc.__class__.__name__}): build it with "
                f"`python -m corral_node_agent guestkit build --out {directory}`") from None
        for path in (kit.kernel, kit.initramfs, kit.display_kernel):
            if not os.path.isfile(path):
                raise GuestKitMissing(f"VM guest kit in {directory} is incomplete ({path} is missing): rebuild it "
                                      f"with `python -m corral_node_agent guestkit build --out {directory} --force`")
        if kit.protocol_version != PROTOCOL_VERSION:
            raise GuestKitMissing(f"VM guest kit in {directory} speaks protocol {kit.protocol_version}, this node "
                                  f"agent {PROTOCOL_VERSION}: rebuild it with "
                                  f"`python -m corral_node_agent guestkit build --out {directory}`")
        return kit


def kernel_cmdline(*, lowers: list[str], hostname: str, upper_mb: int | None = None, upper_disk: str | None = None,
                   tty_shell: bool = False, console: str = "ttyS0", extra: str = "", tcg: bool = True,
                   net: tuple[str, str] | None = None) -> str:
    """The whole kernel command line for a sandbox VM (the /init contract, see init.sh).

    lowers: EROFS layers, base first, each `pmem<N>` or `vd:<serial>`. The writable upper is
    either the ext4 disk with serial `upper_disk` (a sandbox's disk_mb) or a tmpfs of
    `upper_mb` in guest RAM (bare boots: benchmarks, guest-agent tests). `tcg` adds the
    timer settings TCG needs; leave it off under real KVM, where the TSC is measured.
    `net`: (address, gateway) of the guest's eth0 (a /31; an egress allowlist's NIC).
    """
    if not lowers:
        raise ValueError("a VM needs at least one layer")
    for dev in lowers:
        if not _LOWER_RE.match(dev):
            raise ValueError(f"bad layer device {dev!r}: want pmem<N> or vd:<serial>")
    if not _HOSTNAME_RE.match(hostname):
        raise ValueError(f"bad hostname {hostname!r}")
    if (upper_mb is None) == (upper_disk is None):
        raise ValueError("give exactly one of upper_mb and upper_disk")
    if upper_disk is not None and not _LOWER_RE.match(f"vd:{upper_disk}"):
        raise ValueError(f"bad upper disk serial {upper_disk!r}")
    if upper_mb is not None and (not isinstance(upper_mb, int) or upper_mb < 1):
        raise ValueError("upper_mb must be a positive number of MiB")
    upper = f"corral.upper=vd:{upper_disk}" if upper_disk is not None else f"corral.upper_mb={upper_mb}"
    args = [f"console={console}", "quiet", "loglevel=3",
            # A panicking guest reboots at once; QEMU runs with -no-reboot, so it exits.
            "panic=-1", "swiotlb=noforce", "8250.nr_uarts=1", "random.trust_cpu=on",
            # The crypto self-tests are ~0.4 s of a TCG boot (initcall_debug) and test nothing
            # a sandbox relies on; the SP800-108 KDF runs its own (~0.3 s) whatever notests says.
            "cryptomgr.notests", "initcall_blacklist=crypto_kdf108_init",
            *(TCG_CMDLINE if tcg else ()),
            f"corral.lowers={','.join(lowers)}", upper, f"corral.hostname={hostname}"]
    if net is not None:
        address, gateway = (str(ipaddress.IPv4Address(a)) for a in net)
        args.append(f"corral.net={address},{gateway}")
    if tty_shell:
        args.append("corral.tty=1")
    if extra:
        args.append(extra)
    return " ".join(args)


# ---- build ---------------------------------------------------------------------------------


def _run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(argv, capture_output=True, check=False, **kwargs)
    except FileNotFoundError:
        raise GuestKitBuildError(f"{argv[0]} not found (see APT_PACKAGES in the Makefile)") from None
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace") if isinstance(proc.stderr, bytes) else proc.stderr
        raise GuestKitBuildError(f"{' '.join(argv[:3])} failed ({proc.returncode}): {err.strip()[-2000:]}")
    return proc


def resolve_kernel_package() -> tuple[str, str]:
    """(package, version) of the kernel linux-image-cloud-amd64 currently points at. One
    apt-cache call (~1 s: it loads the whole package cache), as a cached build runs it too."""
    out = _run(["apt-cache", "show", "--no-all-versions", KERNEL_META_PACKAGE], text=True).stdout
    match = re.search(r"^Depends:.*?(linux-image-[0-9][^\s,]*-cloud-amd64)\s*\(=\s*([^)\s]+)\)", out, re.M)
    if not match:
        raise GuestKitBuildError(f"cannot resolve the kernel package behind {KERNEL_META_PACKAGE}: {out.strip()[:500]}")
    return match.group(1), match.group(2)


def build_hash(package: str, version: str) -> str:
    h = hashlib.sha256()
    for part in (f"recipe={RECIPE_VERSION}", f"protocol={PROTOCOL_VERSION}", package, version,
                 repr(MODULE_GROUPS)):
        h.update(part.encode() + b"\0")
    for path in (AGENT_SOURCE, INIT_SCRIPT):
        h.update(path.read_bytes())
    h.update(hashlib.sha256(Path(BUSYBOX).read_bytes()).digest())
    return h.hexdigest()[:16]


def extract_vmlinux(vmlinuz: Path, out: Path) -> bool:
    """Cut the LZ4-compressed kernel out of a bzImage and decompress it: QEMU boots the raw
    ELF through PVH, skipping the decompressor (~0.25 s faster under TCG)."""
    data = vmlinuz.read_bytes()
    at = data.find(LZ4_LEGACY_MAGIC)
    if at < 0:
        return False
    # lz4 stops at the bzImage's trailer and complains about it: judge by the output.
    with open(out, "wb") as fh:
        subprocess.run(["lz4", "-dc"], input=data[at:], stdout=fh, stderr=subprocess.DEVNULL, check=False)
    with open(out, "rb") as fh:
        head = fh.read(4)
    if head != b"\x7fELF" or out.stat().st_size < (4 << 20):
        out.unlink(missing_ok=True)
        return False
    return True


def module_closure(modules_dep: str, wanted: tuple[str, ...]) -> list[str]:
    """Module paths (relative to the modules dir) in load order, dependencies first."""
    deps: dict[str, list[str]] = {}
    by_name: dict[str, str] = {}
    for line in modules_dep.splitlines():
        if ":" not in line:
            continue
        path, _, rest = line.partition(":")
        deps[path] = rest.split()
        by_name[_module_name(path)] = path
    order: list[str] = []
    seen: set[str] = set()

    def visit(path: str) -> None:
        if path in seen:
            return
        seen.add(path)
        for dep in deps.get(path, []):
            visit(dep)
        order.append(path)

    for name in wanted:
        if name not in by_name:
            continue  # built into this kernel
        visit(by_name[name])
    return order


def _module_name(path: str) -> str:
    return os.path.basename(path).split(".ko")[0].replace("-", "_")


class CpioWriter:
    """A cpio "newc" archive (what the kernel unpacks as initramfs), written in memory so
    no device nodes or root are needed to build one; every timestamp is 0 (reproducible)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self._ino = 1

    def _entry(self, name: str, mode: int, body: bytes = b"", rdev: tuple[int, int] = (0, 0)) -> None:
        fields = [self._ino, mode, 0, 0, 1, 0, len(body), 0, 0, rdev[0], rdev[1], len(name) + 1, 0]
        self._ino += 1
        self.data += b"070701" + b"".join(b"%08X" % f for f in fields) + name.encode() + b"\0"
        self.data += b"\0" * (-len(self.data) % 4)
        self.data += body
        self.data += b"\0" * (-len(self.data) % 4)

    def directory(self, name: str) -> None:
        self._entry(name, stat.S_IFDIR | 0o755)

    def file(self, name: str, body: bytes, mode: int = 0o644) -> None:
        self._entry(name, stat.S_IFREG | mode, body)

    def symlink(self, name: str, target: str) -> None:
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def char_device(self, name: str, major: int, minor: int) -> None:
        self._entry(name, stat.S_IFCHR | 0o600, rdev=(major, minor))

    def finish(self) -> bytes:
        self._entry("TRAILER!!!", 0)
        return bytes(self.data)


def compile_agent(out: Path) -> None:
    _run(["gcc", "-static", "-O2", "-Wall", f"-DPROTOCOL_VERSION={PROTOCOL_VERSION}", "-o", str(out),
          str(AGENT_SOURCE), "-ljansson"])
    _run(["strip", "-s", str(out)])


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def build(directory: str, *, force: bool = False) -> GuestKit:
    """Build (or reuse) the kit in directory; safe to call from several processes at once."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            package, version = resolve_kernel_package()
        except GuestKitBuildError:
            if not force:
                # No apt metadata (offline node): a kit already built is good enough.
                try:
                    return GuestKit.load(directory)
                except GuestKitMissing:
                    pass
            raise
        wanted_hash = build_hash(package, version)
        if not force:
            try:
                kit = GuestKit.load(directory)
                if kit.build_hash == wanted_hash:
                    return kit
            except GuestKitMissing:
                pass
        return _build(out, package, version, wanted_hash)


def _build(out: Path, package: str, version: str, kit_hash: str) -> GuestKit:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=".build-", dir=out) as tmp_dir:
        tmp = Path(tmp_dir)
        # apt drops privileges to _apt for downloads, which cannot write a root-owned temp dir.
        _run(["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", f"{package}={version}"], cwd=tmp)
        debs = list(tmp.glob("*.deb"))
        if len(debs) != 1:
            raise GuestKitBuildError(f"apt-get download {package} left {len(debs)} .deb files")
        root = tmp / "pkg"
        _run(["dpkg-deb", "-x", str(debs[0]), str(root)])
        kernel_versions = [p.name for p in (root / "lib/modules").iterdir()]
        if len(kernel_versions) != 1:
            raise GuestKitBuildError(f"{package} holds {len(kernel_versions)} module trees")
        kver = kernel_versions[0]
        vmlinuz = root / "boot" / f"vmlinuz-{kver}"

        vmlinux_tmp = tmp / "vmlinux"
        if extract_vmlinux(vmlinuz, vmlinux_tmp):
            kernel_name, kernel_format = "vmlinux", "pvh"
        else:
            kernel_name, kernel_format = "bzImage", "bzimage"

        _run(["depmod", "-b", str(root), kver])
        mod_dir = root / "lib/modules" / kver
        modules_dep = (mod_dir / "modules.dep").read_text()
        # Each group lists what the groups before it do not (init loads core first).
        group_paths: dict[str, list[str]] = {}
        taken: set[str] = set()
        for group, wanted in MODULE_GROUPS.items():
            group_paths[group] = [p for p in module_closure(modules_dep, wanted) if p not in taken]
            taken.update(group_paths[group])

        agent = tmp / "corral-agent"
        compile_agent(agent)

        cpio = CpioWriter()
        for d in ("bin", "dev", "etc", "lib", "lib/modules", "proc", "sys", "sbin", "usr", "usr/bin", "usr/sbin",
                  "lowers", "upper", "newroot", "tmp", "run"):
            cpio.directory(d)
        # The kernel opens /dev/console for /init's stdio before anything mounts devtmpfs.
        cpio.char_device("dev/console", 5, 1)
        cpio.file("init", INIT_SCRIPT.read_bytes(), 0o755)
        cpio.file("bin/busybox", Path(BUSYBOX).read_bytes(), 0o755)
        # Applet links made here rather than by `busybox --install` at boot (~0.2 s under TCG).
        applets = _run([BUSYBOX, "--list-full"], text=True).stdout.split()
        for applet in sorted(set(applets) - {"bin/busybox"}):
            cpio.symlink(applet, "/bin/busybox")
        cpio.file("bin/corral-agent", agent.read_bytes(), 0o755)
        groups: dict[str, list[str]] = {}
        for group, paths in group_paths.items():
            groups[group] = [_module_name(rel) for rel in paths]
            for rel in paths:
                cpio.file(f"lib/modules/{_module_name(rel)}.ko", (mod_dir / rel).read_bytes())
            cpio.file(f"lib/modules/{group}.list", "".join(f"{name}\n" for name in groups[group]).encode())
        initramfs = gzip.compress(cpio.finish(), compresslevel=6, mtime=0)

        shutil.copyfile(vmlinuz, tmp / "bzImage")
        os.replace(tmp / "bzImage", out / "bzImage")
        if kernel_name == "vmlinux":
            os.replace(vmlinux_tmp, out / "vmlinux")
        else:
            (out / "vmlinux").unlink(missing_ok=True)
        _atomic_write(out / "initramfs.cpio.gz", initramfs)
        meta = {
            "kernel": kernel_name, "kernel_format": kernel_format, "display_kernel": "bzImage",
            "initramfs": "initramfs.cpio.gz",
            "kernel_version": kver, "kernel_package": package, "kernel_package_version": version,
            "protocol_version": PROTOCOL_VERSION, "build_hash": kit_hash, "modules": groups,
            "initramfs_bytes": len(initramfs), "build_seconds": round(time.monotonic() - started, 2),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        # kit.json last: its presence with this hash means every other file is complete.
        _atomic_write(out / KIT_JSON, json.dumps(meta, indent=2).encode())
    return GuestKit.load(str(out))


def cli(argv: list[str]) -> int:
    """`python -m corral_node_agent guestkit build [--out DIR] [--force]`"""
    from ...settings import NodeAgentSettings

    parser = argparse.ArgumentParser(prog="python -m corral_node_agent guestkit")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build (or reuse) the VM kernel + initramfs")
    b.add_argument("--out", default=None, help="kit directory (default: CORRAL_NODE_GUESTKIT_DIR)")
    b.add_argument("--force", action="store_true", help="rebuild even if the cached kit is current")
    args = parser.parse_args(argv)
    directory = args.out or NodeAgentSettings().vm.guestkit_dir
    started = time.monotonic()
    try:
        kit = build(directory, force=args.force)
    except GuestKitBuildError as exc:
        print(f"guestkit build failed: {exc}")
        return 1
    print(json.dumps({"directory": directory, "kernel": kit.kernel, "kernel_format": kit.kernel_format,
                      "display_kernel": kit.display_kernel,
                      "initramfs": kit.initramfs, "initramfs_bytes": os.path.getsize(kit.initramfs),
                      "kernel_version": kit.kernel_version, "protocol_version": kit.protocol_version,
                      "build_hash": kit.build_hash, "seconds": round(time.monotonic() - started, 2)}, indent=2))
    return 0
