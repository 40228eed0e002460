"""Containers share the host's kernel: what a hostile tenant tries against it.

Syscalls a sandbox never needs (keyrings, io_uring, vsock, nested user namespaces, bpf, ...),
per-uid kernel state shared between sandboxes (keyrings, inotify), host-wide /proc files,
mounts, /dev, ptrace, sysrq and the network. One attacker sandbox (``shell``) serves the
attempts that leave it as they found it; the last test of the module ends it.
"""

import urllib.parse
from pathlib import Path

import pytest

from tests.polling import until_sync
from tests.security.harness import HOME, host_ip, host_uids, node_paths, probe_result, sandbox_processes

# Each must fail for the sandbox user and for root inside (containment: the call does not
# work; EPERM from the seccomp profile, or any other refusal).
REFUSED_SYSCALLS = {
    "keyctl": "kernel keyrings are per uid, not per sandbox",
    "add_key": "kernel keyrings are per uid, not per sandbox",
    "request_key": "kernel keyrings are per uid, not per sandbox",
    "io_uring_setup": "io_uring: a large, often-exploited attack surface",
    "socket_vsock": "AF_VSOCK is not network-namespaced: it reaches the hypervisor",
    "socket_packet": "raw packet sockets",
    "unshare_user": "nested user namespaces open the kernel's namespaced-root paths",
    "unshare_mount": "a mount namespace of its own",
    "bpf": "eBPF",
    "perf_event_open": "perf events leak host-wide timing and addresses",
    "userfaultfd": "userfaultfd makes kernel races easy to win",
    "open_by_handle_at": "file handles escape the mount namespace (shocker)",
    "kexec_load": "loading a new kernel",
    "init_module": "loading kernel modules",
    "mount": "mounting",
}


@pytest.mark.parametrize("name", sorted(REFUSED_SYSCALLS))
def test_syscall_is_refused(attack, shell, name):
    for user in ("user", "root"):
        result = attack.sh(shell, f"./probe sys {name}", user=user)
        assert probe_result(result.stdout, name) != "OK", f"{name} works as {user}: {REFUSED_SYSCALLS[name]}"
    attack.contained()


def test_unshare_r_gives_no_root(attack, shell):
    for user in ("user", "root"):
        result = attack.sh(shell, "unshare -r id -u", user=user)
        assert result.exit_code != 0 and result.stdout.strip() != "0", (user, result)
        result = attack.sh(shell, "unshare -U -m -p -f --mount-proc id -u", user=user)
        assert result.exit_code != 0, (user, result)
    attack.contained()


def test_keys_added_in_one_sandbox_are_not_found_in_another(attack):
    sandbox = attack.sandbox()
    attack.sh(sandbox, f"./probe addkey {attack.marker} secret-{attack.marker}")
    for neighbour in attack.neighbours:
        result = neighbour.sandbox.exec(["./probe", "readkey", attack.marker])
        assert attack.marker not in result.stdout, f"{neighbour.node_id}'s neighbour read the key: {result.stdout}"
        assert probe_result(result.stdout, "readkey") != "FOUND"
    attack.contained()
    attack.end()


def test_inotify_instances_held_by_one_sandbox_leave_others_theirs(attack):
    """One sandbox holding every inotify instance its uid may have (128 by default) must not
    make inotify_init fail in other sandboxes or on the host. (With user namespaces the
    instances are also charged to the namespace's owner on the host: a namespace crun makes
    as root charges root's count, which must not be exhausted either.)"""
    sandbox = attack.sandbox()
    held = f"/tmp/{attack.marker}.held"  # noqa: S108 - a path inside the sandbox
    attack.sh(sandbox, f"./probe inotify 1024 {held} > /dev/null 2>&1 &")
    count = until_sync(lambda: attack.sh(sandbox, f"cat {held} 2>/dev/null").stdout.strip(), timeout_s=30,
                       what="the attacker to hold its inotify instances")
    assert int(count) >= 100, f"the attacker got only {count} inotify instances"
    for neighbour in attack.neighbours:
        result = neighbour.sandbox.exec(["./probe", "inotify", "16"])
        assert probe_result(result.stdout, "inotify") == "OK", f"neighbour on {neighbour.node_id}: {result.stdout}"
    attack.contained()  # includes 16 inotify instances for root on the host
    attack.end()


def test_every_sandbox_has_host_uids_of_its_own(attack):
    """uid 1000 and root inside map to unprivileged host uids no other sandbox has; files still
    look owned by root (the image) and by the sandbox user (its home, uploads) inside."""
    sandbox = attack.sandbox()
    for user in ("user", "root"):
        attack.sh(sandbox, "sleep 600 > /dev/null 2>&1 &", user=user)
    node_id = sandbox.info.node_id
    mine = _uids(node_id, sandbox)
    assert len(mine) >= 1 and 0 not in mine, f"host uids of the attacker's processes: {mine}"
    for neighbour in attack.neighbours:
        theirs = _uids(neighbour.node_id, neighbour.sandbox)
        assert mine.isdisjoint(theirs), f"the attacker shares host uids {mine & theirs} with a neighbour"
    uid_map = attack.sh(sandbox, "cat /proc/self/uid_map").stdout.split()
    assert uid_map[:3] != ["0", "0", "4294967295"], "no user namespace: ids inside are the host's"
    sandbox.write_file("uploaded.txt", "x")
    owners = attack.sh(sandbox, f"stat -c '%u:%g' /bin/busybox {HOME} {HOME}/uploaded.txt").stdout.split()
    assert owners == ["0:0", "1000:1000", "1000:1000"], owners
    attack.contained()
    attack.end()


def _uids(node_id: str, sandbox) -> set[int]:
    return host_uids(sandbox_processes(node_id, sandbox))


@pytest.mark.parametrize("path", ["/proc/kpageflags", "/proc/kpagecgroup", "/proc/slabinfo"])
def test_host_wide_proc_files_read_nothing(attack, shell, path):
    for user in ("user", "root"):
        result = attack.sh(shell, f"head -c 65536 {path} 2>/dev/null | wc -c", user=user)
        assert result.stdout.strip() == "0", f"{user} read {result.stdout.strip()} bytes of {path}"
    attack.contained()


def test_recursive_reads_of_kpagecgroup_get_nothing(attack, shell):
    script = ("for i in 1 2 3 4 5; do for f in /proc/kpage*; do cat $f; done; done 2>/dev/null | wc -c; "
              "find /proc -maxdepth 1 -name 'kpage*' -exec cat {} + 2>/dev/null | wc -c")
    result = attack.sh(shell, script, user="root", timeout_s=120)
    assert result.stdout.split() == ["0", "0"], f"bytes read: {result.stdout.split()}"
    attack.contained()


def test_proc_cmdline_is_not_the_hosts(attack, shell):
    host = Path("/proc/cmdline").read_text().strip()
    for user in ("user", "root"):
        inside = attack.sh(shell, "cat /proc/cmdline", user=user).stdout.strip()
        assert host not in inside, f"the sandbox reads the host's kernel command line: {inside[:200]}"
    attack.contained()


def test_mountinfo_shows_no_host_paths(attack, shell, lab):
    # (and for an allowlist sandbox too: test_container_filesystem.py)
    for user in ("user", "root"):
        for path in ("/proc/self/mountinfo", "/proc/1/mountinfo", "/proc/self/mounts"):
            seen = attack.sh(shell, f"cat {path}", user=user).stdout
            leaked = [line for line in seen.splitlines() if any(p in line for p in node_paths(lab.platform))]
            assert not leaked, f"{path} ({user}) shows host paths: {leaked[:3]}"
    attack.contained()


def test_sysrq_and_kernel_sysctls_are_not_writable(attack, shell):
    for script in ("echo h > /proc/sysrq-trigger", "echo 1 > /proc/sys/kernel/sysrq",
                   "echo 100 > /proc/sys/kernel/pid_max", "echo 1 > /proc/sys/vm/drop_caches"):
        result = attack.sh(shell, script, user="root")
        assert result.exit_code != 0, f"root could run: {script}"
    attack.contained()


def test_mount_attempts_fail(attack, shell):
    attempts = ["mount -t tmpfs none /tmp/m", "mount -t proc proc /tmp/m", "mount --bind / /tmp/m",
                "mount -o remount,rw /proc/sys", "umount /proc/kpageflags", "umount -l /proc/keys",
                "mount -t cgroup -o memory none /tmp/m", "mount -o remount,rw /sys"]
    attack.sh(shell, "mkdir -p /tmp/m", user="root")
    for script in attempts:
        result = attack.sh(shell, script, user="root")
        assert result.exit_code != 0, f"root could run: {script}"
    assert attack.sh(shell, "grep -c ' /tmp/m ' /proc/self/mountinfo").stdout.strip() == "0"
    attack.contained()


def test_dev_holds_no_block_devices_or_kernel_log(attack, shell):
    assert attack.sh(shell, "find /dev -type b", user="root").stdout == ""
    for path in ("/dev/kmsg", "/dev/mem", "/dev/kcore", "/dev/port", "/dev/vsock", "/dev/kvm", "/dev/fuse"):
        result = attack.sh(shell, f"head -c 16 {path} 2>/dev/null | wc -c", user="root")
        assert result.stdout.strip() == "0", f"root read {path}"
    # A device node made by hand is refused by the devices cgroup (or mknod already is).
    result = attack.sh(shell, "mknod /tmp/sda b 8 0 && head -c 512 /tmp/sda | wc -c; "
                              "mknod /tmp/kmsg c 1 11 && head -c 16 /tmp/kmsg | wc -c; rm -f /tmp/sda /tmp/kmsg",
                       user="root")
    assert result.stdout.split() in ([], ["0"], ["0", "0"]), f"a hand-made device node was readable: {result!r}"
    attack.contained()


def test_ptrace_reaches_no_process_outside(attack, shell, lab):
    """Host pids of the node-agent and of a neighbour's processes, attached from inside: the
    sandbox's pid namespace has no such processes (or refuses them)."""
    outside = {int((lab.platform["state"] / "run" / f"{node}.pid").read_text()) for node in lab.node_ids}
    for neighbour in attack.neighbours:
        outside |= set(sandbox_processes(neighbour.node_id, neighbour.sandbox))
    own = {int(p) for p in attack.sh(shell, "ls /proc | grep '^[0-9]*$'").stdout.split()}
    targets = sorted(outside - own)
    assert targets, "no outside process to aim at"
    result = attack.sh(shell, "./probe ptrace " + " ".join(map(str, targets)), user="root")
    attached = [line for line in result.stdout.splitlines() if line.endswith(" OK")]
    assert not attached, f"attached to processes outside the sandbox: {attached}"
    assert len(result.stdout.splitlines()) == len(targets), result
    attack.contained()


def test_network_reaches_nothing(attack, shell, lab):
    assert attack.sh(shell, "ip -o link | grep -vc ': lo:'").stdout.strip() == "0", "an interface besides lo"
    assert attack.sh(shell, "ip route; ip -6 route").stdout.strip() == "", "a route exists"
    urls = [*lab.platform["urls"].values(), lab.platform["redis_url"], lab.platform["amqp_url"]]
    ports = [urllib.parse.urlparse(url).port for url in urls]
    targets = [f"tcp 127.0.0.1 {port}" for port in ports] + [f"tcp {host_ip()} {port}" for port in ports]
    targets += ["tcp 1.1.1.1 53", "tcp 10.0.2.2 22", "tcp 169.254.169.254 80", "vsock 2 22", "vsock 1 22"]
    script = "; ".join(f"./probe {t}" for t in targets)
    result = attack.sh(shell, script, user="root", timeout_s=120)
    lines = result.stdout.splitlines()
    assert len(lines) == len(targets), result
    reached = [line for line in lines if line.endswith(" OK")]
    assert not reached, f"reached from inside: {reached}"
    attack.contained()


def test_the_shared_sandbox_leaves_nothing(attack, shell):
    attack.end(shell)
