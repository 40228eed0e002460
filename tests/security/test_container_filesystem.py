"""The filesystem a hostile tenant attacks: the image it shares with other sandboxes, other
sandboxes' files at guessed host paths, and the files API (run by the root node-agent on the
host) steered with symlinks swapped under it."""

import hashlib
import shutil
from pathlib import Path

import httpx
import pytest

from corral import CorralError
from tests.live_platform import runtime_id
from tests.security.harness import HOME, mountinfo_naming, node_paths, sandbox_processes


def test_overwriting_bin_sh_affects_only_this_sandbox(attack):
    sandbox = attack.sandbox(probe=False)
    for script in ("echo x > /bin/busybox", "rm /bin/sh", "echo x > /etc/passwd"):
        assert attack.sh(sandbox, script).exit_code != 0, f"the sandbox user could run: {script}"
    evil = f"#!/tmp/busybox sh\\necho pwned-{attack.marker}\\n"
    attack.sh(sandbox, f"cp /bin/busybox /tmp/busybox && rm /bin/sh && printf '{evil}' > /bin/sh && chmod 755 /bin/sh",
              user="root")
    assert sandbox.exec(["/bin/sh", "-c", "echo hi"]).stdout == f"pwned-{attack.marker}\n", "the overwrite failed"
    # Through the files API too: a busybox that runs is in use (a 4xx, never a 5xx),
    # /etc/passwd is simply replaced.
    sandbox.exec(["/bin/busybox", "sh", "-c", "/bin/busybox sleep 600 </dev/null >/dev/null 2>&1 &"])
    with pytest.raises(CorralError) as info:
        sandbox.write_file("/bin/busybox", f"junk-{attack.marker}")
    assert 400 <= info.value.status < 500, info.value
    sandbox.write_file("/etc/passwd", f"junk-{attack.marker}")
    assert sandbox.exec(["/tmp/busybox", "cat", "/etc/passwd"]).stdout == f"junk-{attack.marker}"

    def digests(sb) -> list[str]:
        return [line.split()[0] for line in sb.exec(["sha256sum", "/bin/busybox", "/etc/passwd"]).stdout.splitlines()]

    original = digests(attack.neighbours[0].sandbox)
    fresh = [attack.sandbox(probe=False) for _ in range(2)]  # on the same layers, after the attack
    for sb in [*fresh, *(n.sandbox for n in attack.neighbours)]:
        assert sb.exec(["sh", "-c", "echo fine"]).stdout == "fine\n", f"{sb.id} on {sb.info.node_id}"
        assert digests(sb) == original, f"{sb.id}'s image files changed"
    attack.contained()
    attack.end()


def test_the_init_the_node_binds_in_stays_the_nodes(attack):
    # Every container's PID 1 is the node's catatonit, one host file bound read-only at
    # /dev/init in all of them (oci.INIT_ARGS): root in one sandbox must not change it for
    # the host and the others, nor take PID 1 down from inside.
    host_init = Path("/usr/bin/catatonit")  # the node-agent's default container_init
    before = hashlib.sha256(host_init.read_bytes()).hexdigest()
    sandbox = attack.sandbox(probe=False)
    for script in ("echo x > /dev/init", "printf x | dd of=/dev/init conv=notrunc", "chmod 777 /dev/init",
                   "mount -o remount,rw /dev/init", "umount /dev/init", "rm -f /dev/init", "mv /dev/init /dev/x",
                   "kill -KILL 1"):
        attack.sh(sandbox, script, user="root")
    assert hashlib.sha256(host_init.read_bytes()).hexdigest() == before
    assert sandbox.refresh().state == "running"
    assert sandbox.exec("ps -o pid,args | sed -n 2p").stdout.split() == ["1", "/dev/init", "-P"]
    for neighbour in attack.neighbours:  # (they bind the node's copy of it: that one is unchanged too)
        assert neighbour.sandbox.exec(["/dev/init", "-V"]).exit_code == 0
        assert neighbour.sandbox.exec(["sha256sum", "/dev/init"]).stdout.split()[:1] == [before]
    attack.contained()
    attack.end()


@pytest.mark.parametrize("network", ["none", {"allow": []}], ids=["default", "allowlist"])
def test_the_inside_view_names_no_path_of_the_node(attack, lab, network):
    """mountinfo shows where each mount comes from: none may name a path of the node (its
    state dir, the host's init binary...). /proc/config.gz (the host kernel's build config)
    and /sys/kernel/mm (its memory management state) read as nothing; PID 1 stays the init
    at /dev/init. What cannot be hidden is listed in docs/security.md."""
    sandbox = attack.sandbox(probe=False, network=network)
    for user in ("user", "root"):
        for path in ("/proc/self/mountinfo", "/proc/1/mountinfo"):
            seen = attack.sh(sandbox, f"cat {path}", user=user).stdout
            assert "/dev/init" in seen, seen  # (what is looked at is the mount table)
            named = mountinfo_naming(seen, node_paths(lab.platform))
            assert not named, f"{path} ({user}) names paths of the node: {named}"
        config = attack.sh(sandbox, "head -c 65536 /proc/config.gz 2>/dev/null | wc -c", user=user).stdout.strip()
        assert config == "0", f"{user} read {config} bytes of the host's kernel config"
        mm = attack.sh(sandbox, "ls -A /sys/kernel/mm 2>/dev/null; cat /sys/kernel/mm/*/* 2>/dev/null | wc -c",
                       user=user).stdout.split()
        assert mm == ["0"], f"{user} sees the host's /sys/kernel/mm: {mm}"
    assert sandbox.exec("cat /proc/1/cmdline | tr '\\0' ' '").stdout.split() == ["/dev/init", "-P"]
    attack.contained()
    attack.end()


def _guessed_paths(lab, neighbour) -> list[str]:
    """Where an attacker would look for a neighbour's files: the node's state dir (mountinfo
    showed it), the conventional /var/lib/corral, and its processes' /proc/<pid>/root."""
    rel = "home/user/canary.txt"
    state = lab.platform["state"] / "nodes" / neighbour.node_id
    name = runtime_id(neighbour.sandbox)  # its directory's (a claimed warm-pool container keeps its own)
    paths = [f"{state}/sandboxes/{name}/rootfs/{rel}", f"{state}/sandboxes/{name}/upper/upper/{rel}",
             f"/var/lib/corral/{neighbour.node_id}/sandboxes/{name}/rootfs/{rel}",
             f"/var/lib/corral/sandboxes/{name}/rootfs/{rel}"]
    paths += [f"/proc/{pid}/root/{rel}" for pid in sandbox_processes(neighbour.node_id, neighbour.sandbox)]
    return paths


def test_guessed_host_paths_of_other_sandboxes_are_unreachable(attack, lab):
    sandbox = attack.sandbox(probe=False)
    for neighbour in attack.neighbours:
        paths = _guessed_paths(lab, neighbour)
        assert len(paths) > 4, "no process of the neighbour found on the host"
        for user in ("user", "root"):
            seen = attack.sh(sandbox, "; ".join(f"cat {p}" for p in paths) + "; find / -xdev -name canary.txt",
                             user=user).stdout
            assert neighbour.canary not in seen and "canary.txt" not in seen, f"{user} reached {neighbour.id}: {seen}"
        for path in paths:  # through the files API, which the root node-agent serves on the host
            with pytest.raises(CorralError) as info:
                data = sandbox.read_file(path)
                assert neighbour.canary.encode() not in data
            assert 400 <= info.value.status < 500, (path, info.value)
    attack.contained()
    attack.end()


def test_symlink_swaps_during_uploads_and_downloads_never_escape(attack, lab, tmp_path_factory):
    """Inside, ``d`` and ``f`` flip between a real dir/file and symlinks to a host directory
    while the files API writes into and reads from them: nothing may be written there and the
    host's canary may never be read."""
    host_dir = Path(f"/tmp/{attack.marker}-host")  # noqa: S108 - the host path the symlinks aim at
    host_dir.mkdir()
    try:
        (host_dir / "canary.txt").write_text(f"host-{attack.marker}")
        sandbox = attack.sandbox(probe=False)
        flip = (f"cd {HOME}; i=0; while [ $i -lt 5000 ] && [ ! -e stop ]; do "
                "rm -rf d f; mkdir d; echo inside > d/canary.txt; echo inside > f; "
                f"rm -rf d f; ln -s {host_dir} d; ln -s {host_dir}/canary.txt f; i=$((i+1)); done")
        attack.sh(sandbox, f"({flip}) < /dev/null > /dev/null 2>&1 &")
        seen = {"inside": 0, "refused": 0}
        url = f"{lab.api}/v1/sandboxes/{sandbox.id}/files"
        with httpx.Client(headers=lab.headers, timeout=30) as http:
            for i in range(600):
                for path in (f"d/up-{i}", "f"):
                    put = http.put(url, params={"path": path}, content=f"upload-{attack.marker}".encode())
                    assert put.status_code < 500, put.text
                for path in ("d/canary.txt", "f"):
                    got = http.get(url, params={"path": path})
                    assert got.status_code < 500, got.text
                    assert f"host-{attack.marker}" not in got.text, f"read the host's {path} through a symlink"
                    seen["inside" if got.status_code == 200 else "refused"] += 1
                if i >= 100 and all(seen.values()):
                    break
        attack.sh(sandbox, f"touch {HOME}/stop")
        assert all(seen.values()), f"the race was not exercised: {seen}"
        assert sorted(p.name for p in host_dir.iterdir()) == ["canary.txt"], "the files API wrote through a symlink"
        assert (host_dir / "canary.txt").read_text() == f"host-{attack.marker}", "the host canary was overwritten"
    finally:
        shutil.rmtree(host_dir, ignore_errors=True)
    attack.contained()
    attack.end()


def test_layer_files_on_the_host_are_unchanged_by_writes_inside(attack, lab):
    """Root inside rewrites image files; the layer chunks the nodes (and the image service)
    hold for every sandbox keep their bytes."""
    state = lab.platform["state"]
    layers = sorted([*state.glob("nodes/*/layers/chunks/*/*"), *state.glob("images/chunks/sha256/*/*")])
    assert layers, "no layer chunks found"
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in layers}
    sandbox = attack.sandbox(probe=False)
    attack.sh(sandbox, "for f in /bin/busybox /etc/passwd; do echo x > $f; done; "
                       "dd if=/dev/zero of=/bin/busybox bs=1k count=1 conv=notrunc", user="root")
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in layers}
    assert before == after
    attack.contained()
    attack.end()
