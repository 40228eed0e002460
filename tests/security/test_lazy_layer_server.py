"""The lazy-layer server a hostile tenant attacks: the root process on each node that serves
every sandbox's lazily loaded image layers (FUSE) from the node-wide chunk cache, driven over a
control socket in the node's state dir (``layers.lazy.server_main``). Reaching it would let a
sandbox register any layer (another tenant's) or read the chunks of every tenant's images;
starving it would stall every sandbox of the node."""

import socket
import time
from pathlib import Path

import httpx
import pytest

from corral import CorralError
from tests.live_platform import lazy_server_pid
from tests.polling import until_sync
from tests.security.harness import HOME, PROBE, probe_result


def _layers_dir(lab, node_id: str) -> Path:
    return lab.platform["state"] / "nodes" / node_id / "layers"


def _served_files(pid: int, layers: Path) -> list[str]:
    """The FUSE files the server serves (one per lazily loaded layer), as the host sees them."""
    return sorted(p.name for p in Path(f"/proc/{pid}/root{layers}/lazy").iterdir())


def _host_connects(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        try:
            s.connect(path)
        except OSError:
            return False
    return True


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks (USER_HZ 100)


def test_the_lazy_layer_server_is_out_of_a_sandboxs_reach(attack, lab):
    """Threat: root in a container connects to the server's control socket (and registers or
    fills any layer), opens its state dir (the FUSE files and chunks of every tenant's layers),
    or finds the server's process in /proc (its root, fds and memory)."""
    sandbox = attack.sandbox()
    node = sandbox.info.node_id
    pid = lazy_server_pid(lab.platform, node)
    layers = _layers_dir(lab, node)
    sock = f"{layers}/lazy-server.sock"
    served = _served_files(pid, layers)
    assert served, "the server serves no layer: the sandbox's image is not lazily loaded"
    chunk_dir = next(p for p in (layers / "chunks").iterdir() if p.is_dir())
    chunk = next(chunk_dir.iterdir())
    files = [str(layers), f"/proc/{pid}/root{layers}/lazy/{served[0]}", str(chunk), f"/proc/{pid}/root{chunk}",
             f"/proc/{pid}/cmdline", f"/proc/{pid}/root/", f"/proc/{pid}/fd/0"]
    sockets = [sock, f"/proc/{pid}/root{sock}"]
    # The paths are right: from the host every one of them opens, the socket answers.
    assert all(_host_connects(path) for path in sockets)
    for path in files:
        Path(path).stat()
    files.append(f"{layers}/lazy/{served[0]}")  # (only in the server's mount namespace, even on the host)

    out = attack.sh(sandbox, f"{PROBE} unix {' '.join(sockets)}; {PROBE} open {' '.join(files)}", user="root").stdout
    for path in sockets:
        assert probe_result(out, f"unix {path}") != "OK", f"the sandbox connected to {path}"
    for path in files:
        assert probe_result(out, f"open {path}") != "OK", f"the sandbox opened {path}"
    # Not in its mount namespace (no FUSE mount, no state dir), nor in its pid namespace.
    mountinfo = attack.sh(sandbox, "cat /proc/self/mountinfo", user="root").stdout
    cmdlines = attack.sh(sandbox, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '", user="root").stdout
    assert " - fuse" not in mountinfo, mountinfo
    assert not [line for line in mountinfo.splitlines() if line.split()[4].startswith(str(layers))], mountinfo
    assert "lazy.server" not in cmdlines and str(layers) not in cmdlines, cmdlines
    attack.contained()
    attack.end()


def test_a_sandbox_cannot_have_another_tenants_layer_served_to_it(attack, lab):
    """Threat: a tenant names another tenant's committed layer (its secrets in a diff) in a
    sandbox or an environment of its own, so that its node's server mounts it for the attacker;
    or reads it from the node where the owner's sandbox has it served."""
    secret = f"secret-{attack.marker}"
    victim = lab.create(lab.other)
    try:
        victim.write_file(f"{HOME}/secret.txt", secret)
        committed = victim.commit(environment=f"vault-{attack.marker}")
    finally:
        lab.delete_quietly(victim)
    owner_view = lab.create(lab.other, environment=f"vault-{attack.marker}")  # served on its node now
    try:
        assert owner_view.exec(f"cat {HOME}/secret.txt").stdout == secret
        node = owner_view.info.node_id
        pid = lazy_server_pid(lab.platform, node)
        layers = _layers_dir(lab, node)
        hexd = committed.layer.digest.removeprefix("sha256:")
        assert hexd in _served_files(pid, layers), "the owner's layer is not lazily served"

        # By name: neither its environment nor its layer is the attacker's to use.
        with pytest.raises(CorralError) as refused:
            lab.create(environment=f"vault-{attack.marker}")
        assert refused.value.code == "unknown_environment"
        base = lab.attacker.environments.get("busybox").base
        r = httpx.post(f"{lab.api}/v1/environments", headers=lab.headers, timeout=30,
                       json={"name": f"steal-{attack.marker}", "base": base, "diffs": [committed.layer.ref]})
        assert 400 <= r.status_code < 500, f"an environment on another tenant's layer: {r.status_code} {r.text}"

        # By path, from a sandbox on the node that serves it.
        for _ in range(8):
            sandbox = attack.sandbox()
            if sandbox.info.node_id == node:
                break
        else:
            pytest.fail(f"no attacker sandbox landed on {node}")
        paths = [f"{layers}/lazy/{hexd}", f"/proc/{pid}/root{layers}/lazy/{hexd}", f"{layers}/mnt/{hexd}/"]
        out = attack.sh(sandbox, f"{PROBE} open {' '.join(paths)}", user="root").stdout
        for path in paths:
            assert probe_result(out, f"open {path}") != "OK", f"the attacker opened {path}"
        attack.contained()
        attack.end()
    finally:
        lab.delete_quietly(owner_view)


def _on_node(create, node: str, drop):
    """A sandbox from ``create()`` placed on ``node``. The others made on the way are kept until
    then (spread placement sends the next one to the emptier node), then dropped."""
    elsewhere = []
    try:
        for _ in range(8):
            sandbox = create()
            if sandbox.info.node_id == node:
                return sandbox
            elsewhere.append(sandbox)
        pytest.fail(f"no sandbox landed on {node}")
    finally:
        for sandbox in elsewhere:
            drop(sandbox)


BIG_MB = 96  # the attacker's image: bigger than its memory, so its page cache cannot hold it
READERS = 4


def test_reading_a_whole_lazy_image_in_a_loop_does_not_starve_a_neighbour(attack, lab):
    """Threat: a sandbox re-reads an image bigger than its memory limit in a loop from several
    processes (its page cache cannot keep it, so every pass goes through the node's one
    lazy-layer server) to stall or crash the server, and with it the image reads of every other
    sandbox on the node."""
    # Both images are made on one node, so that their sandboxes go there (layer locality).
    owner = lab.create(lab.other)
    node = owner.info.node_id
    try:
        maker = _on_node(lambda: attack.sandbox(probe=False, memory_mb=64), node, attack.end)
        made = attack.sh(maker, f"mkdir -p /srv && dd if=/dev/urandom of=/srv/big bs=1M count={BIG_MB} && sync",
                         user="root", timeout_s=120)
        assert made.exit_code == 0, made
        maker.commit(environment=f"big-{attack.marker}")
        attack.end(maker)
        # The neighbour's own image: a layer nobody on the node read yet, read during the attack.
        made = owner.exec("mkdir -p /srv && dd if=/dev/urandom of=/srv/own.bin bs=1M count=8 2>/dev/null && "
                          "sha256sum /srv/own.bin", user="root")
        assert made.exit_code == 0, made
        want = made.stdout.split()[0]
        owner.commit(environment=f"own-{attack.marker}")
    finally:
        lab.delete_quietly(owner)
    hog = _on_node(lambda: attack.sandbox(probe=False, environment=f"big-{attack.marker}", memory_mb=32), node,
                   attack.end)
    neighbour = _on_node(lambda: lab.create(lab.other, environment=f"own-{attack.marker}"), node, lab.delete_quietly)
    try:
        pid = lazy_server_pid(lab.platform, node)
        loop = "while :; do cat /srv/big > /dev/null; done"
        attack.sh(hog, " ".join(f"( {loop} ) < /dev/null > /dev/null 2>&1 &" for _ in range(READERS)) + " true")
        # The attack is real once the server spends a core-second on it (else this proves nothing).
        cpu_before = _cpu_s(pid)
        until_sync(lambda: _cpu_s(pid) - cpu_before > 1.0, timeout_s=30, what="the attacker's reads reach the server")
        t0 = time.monotonic()
        got = neighbour.exec("sha256sum /srv/own.bin", timeout_s=60)
        took = time.monotonic() - t0
        assert got.exit_code == 0 and got.stdout.split()[0] == want, got
        assert took < 15, f"the neighbour's read took {took:.1f}s under the attack"
        assert lazy_server_pid(lab.platform, node) == pid, "the server restarted under the attack"
        attack.contained()
    finally:
        lab.delete_quietly(neighbour)
    attack.end()
