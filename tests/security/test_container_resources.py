"""Resources a hostile tenant tries to take from the node: host RAM and disk through the files
API and from inside, PIDs, memory beyond the machine, output floods, oversized requests."""

import base64
import json
import os
import threading
import time
import urllib.parse
from pathlib import Path

import httpx
import pytest

from tests.live_platform import internal_headers, runtime_id
from tests.polling import until_sync
from tests.security.harness import HOME, LABELS, host_memtotal_mb, host_shmem_mb

MIB = 1024 * 1024


def _upload(lab, sandbox, path: str, data, timeout: float = 60) -> httpx.Response:
    return httpx.put(f"{lab.api}/v1/sandboxes/{sandbox.id}/files", params={"path": path}, content=data,
                     headers=lab.headers, timeout=timeout)


def _fill_through_api(lab, sandbox, prefix: str, limit_mib: int) -> tuple[int, httpx.Response | None]:
    """Upload 1 MiB files until one is refused or ``limit_mib`` are in; (accepted, refusal)."""
    for i in range(limit_mib):
        response = _upload(lab, sandbox, f"{prefix}/{i}", os.urandom(MIB))
        if response.status_code != 204:
            return i, response
    return limit_mib, None


def _error(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] and body["error"]["message"], body
    return body["error"]


def test_files_api_bytes_do_not_land_in_host_ram(attack, lab):
    """The writable layer is the sandbox's own disk: 64 MiB uploaded into a 32 MiB sandbox are
    on its disk quota, not in host shared memory that no limit counts."""
    sandbox = attack.sandbox(probe=False, memory_mb=32, disk_mb=256)
    before = host_shmem_mb()
    accepted, refused = _fill_through_api(lab, sandbox, attack.marker, 64)
    grown = host_shmem_mb() - before
    assert refused is None, f"upload {accepted} refused: {refused.status_code} {refused.text}"
    assert grown < 32, f"host Shmem grew by {grown} MiB for 64 MiB uploaded into a memory_mb=32 sandbox"
    used = int(attack.sh(sandbox, f"du -sm {HOME}/{attack.marker}").stdout.split()[0])
    assert used >= 64, f"the sandbox holds {used} MiB of the 64 uploaded"
    attack.contained()
    attack.end()


def test_disk_fill_from_inside_is_enospc_not_oom(attack):
    """disk_mb is a disk quota independent of memory_mb: filling it from inside ends in ENOSPC
    (or EDQUOT), the writer is not OOM-killed, and the space comes back when freed."""
    sandbox = attack.sandbox(probe=False, memory_mb=64, disk_mb=128)
    result = attack.sh(sandbox, f"dd if=/dev/zero of={HOME}/{attack.marker} bs=1M count=192", timeout_s=120)
    assert not result.oom_killed, f"writing to the disk was OOM-killed: {result!r}"
    assert result.exit_code != 0 and ("No space left" in result.stderr or "quota exceeded" in result.stderr), result
    written = int(attack.sh(sandbox, f"stat -c %s {HOME}/{attack.marker}").stdout)
    assert 64 * MIB < written <= 128 * MIB, f"{written} bytes written into a disk_mb=128 sandbox"
    attack.sh(sandbox, f"rm {HOME}/{attack.marker}")
    again = attack.sh(sandbox, f"dd if=/dev/zero of={HOME}/again bs=1M count=32 && echo ok", timeout_s=60)
    assert again.stdout.strip().endswith("ok"), f"freed space did not come back: {again!r}"
    attack.contained()
    attack.end()


def test_disk_fill_through_the_api_is_a_4xx(attack, lab):
    sandbox = attack.sandbox(probe=False, memory_mb=32, disk_mb=24)
    accepted, refused = _fill_through_api(lab, sandbox, attack.marker, 48)
    assert refused is not None, "48 MiB went into a disk_mb=24 sandbox"
    assert refused.status_code in (413, 507), refused.text
    _error(refused)
    assert accepted <= 24, f"{accepted} MiB accepted into a disk_mb=24 sandbox"
    assert sandbox.exec("echo alive").stdout == "alive\n"
    sandbox.exec(f"rm -r {HOME}/{attack.marker}")
    assert _upload(lab, sandbox, "after.bin", os.urandom(MIB)).status_code == 204, "freed space did not come back"
    attack.contained()
    attack.end()


def test_oversized_uploads_are_413_even_without_a_length(attack, lab):
    sandbox = attack.sandbox(probe=False)

    def chunks():
        for _ in range(3):
            yield b"z" * MIB

    for body in (b"z" * (3 * MIB), chunks()):
        response = _upload(lab, sandbox, f"{attack.marker}.bin", body)
        assert response.status_code == 413, response.text
        assert _error(response)["code"] == "payload_too_large"
    assert attack.sh(sandbox, f"ls {HOME}").stdout.split() == [], "a refused upload left a file"
    attack.contained()
    attack.end()


def _pids_file(node_id: str, sandbox, name: str) -> str:
    path = Path(f"/sys/fs/cgroup/pids/corral/{node_id}/{runtime_id(sandbox)}/{name}")
    return path.read_text() if path.exists() else ""


def _forks_refused(node_id: str, sandbox) -> int:
    """pids.events "max": how many forks the sandbox's pids limit has refused."""
    for line in _pids_file(node_id, sandbox, "pids.events").splitlines():
        key, _, value = line.partition(" ")
        if key == "max":
            return int(value)
    return 0


def test_fork_bomb_stays_inside_its_pids_limit(attack):
    sandbox = attack.sandbox(probe=False, memory_mb=128, pids_limit=64)
    node_id = sandbox.info.node_id
    # busybox's sh gives up when a fork fails, so the bomb burns out soon after it hits the
    # limit: the kernel's count of refused forks is what proves it reached the limit.
    attack.sh(sandbox, "(b() { b | b & }; b) < /dev/null > /dev/null 2>&1 &")
    until_sync(lambda: _forks_refused(node_id, sandbox) > 0, timeout_s=30, what="the fork bomb to hit its limit")
    attack.contained()  # neighbours, the node, the control plane
    assert int(_pids_file(node_id, sandbox, "pids.current") or 0) <= 64
    attack.end()  # and deleting a sandbox mid-bomb leaves no process behind


def test_busy_loops_get_no_more_cpu_than_the_sandbox_asked_for(attack):
    """Four busy loops in a cpu=0.1 sandbox for 2 s use ~0.2 s of cpu, not the node's cores (the
    cap is written by the node-agent after crun's start, not by crun: containers/oci.py)."""
    sandbox = attack.sandbox(probe=False, cpu=0.1)
    usage = next(Path("/sys/fs/cgroup").glob(f"cpu*acct*/corral/{sandbox.info.node_id}/{runtime_id(sandbox)}/cpuacct.usage"),
                 None)
    if usage is None:
        pytest.skip("no cgroup v1 cpuacct hierarchy on this host")
    before, t0 = int(usage.read_text()), time.monotonic()
    attack.sh(sandbox, "for i in 1 2 3 4; do timeout 2 sh -c 'while :; do :; done' & done; wait", timeout_s=60)
    wall, used = time.monotonic() - t0, (int(usage.read_text()) - before) / 1e9
    # Uncapped, four loops take both cores: ~4 s of cpu. The cap allows 0.1 s per second plus
    # one banked period (10 ms) and the exec's own start.
    assert 0 < used <= 0.1 * wall + 0.1, f"{used:.2f} s of cpu in {wall:.2f} s at cpu=0.1"
    attack.contained()
    attack.end()


def _pid_max() -> int:
    return int(Path("/proc/sys/kernel/pid_max").read_text())


def test_the_node_caps_all_sandboxes_pids_below_pid_max(attack, lab):
    """A node-level pids cgroup above every sandbox, the caps of all nodes on this host
    together below pid_max with a reserve left for the platform (Redis, RabbitMQ, QEMU)."""
    caps = {}
    for node_id in lab.node_ids:
        cap = Path(f"/sys/fs/cgroup/pids/corral/{node_id}/pids.max")
        assert cap.exists(), f"no node-level pids cgroup for {node_id}"
        caps[node_id] = cap.read_text().strip()
    assert all(v.isdigit() for v in caps.values()), f"a node has no pids cap: {caps}"
    total = sum(map(int, caps.values()))
    assert total <= _pid_max() - 1024, f"the nodes may take {total} of pid_max {_pid_max()} PIDs: {caps}"
    attack.contained()


def _create(lab, **body) -> httpx.Response:
    return httpx.post(f"{lab.api}/v1/sandboxes", json={"environment": "busybox", "labels": LABELS, **body},
                      headers=lab.headers, timeout=60)


def _count(lab) -> int:
    response = httpx.get(f"{lab.api}/v1/sandboxes", params={"label": "suite=security"}, headers=lab.headers)
    return len(response.json()["items"])


@pytest.mark.parametrize("field,value", [
    ("pids_limit", "pid_max+1"),
    ("pids_limit", 65536),
    ("memory_mb", "2*host"),
    ("disk_mb", "2*disk"),
])
def test_requests_no_node_can_hold_are_422(attack, lab, field, value):
    if value == "pid_max+1":
        value = _pid_max() + 1
    elif value == "2*host":
        value = 2 * host_memtotal_mb()
    elif value == "2*disk":
        st = os.statvfs(lab.platform["state"])
        value = 2 * st.f_blocks * st.f_frsize // MIB
        if value > 1048576:
            pytest.skip("this host's disk is larger than the largest disk_mb a request may name")
    before = _count(lab)
    response = _create(lab, **{field: value})
    try:
        assert response.status_code == 422, f"{field}={value}: {response.status_code} {response.text[:300]}"
        assert any(field in d["loc"] for d in _error(response)["details"]), response.text
    finally:
        if response.status_code == 202:
            httpx.delete(f"{lab.api}/v1/sandboxes/{response.json()['id']}", headers=lab.headers)
    assert _count(lab) == before
    attack.contained()


def test_two_sandboxes_cannot_overcommit_host_memory(attack, lab):
    """Two sandboxes that request 60% of this machine's RAM each: at most one may run (the two
    nodes on this host must not each promise most of it). Requests are what is promised; a
    limit alone is not (the node's cgroup caps what limits add up to)."""
    memory_mb = int(0.6 * host_memtotal_mb())
    ids = []
    try:
        for _ in range(2):
            response = _create(lab, memory_mb=memory_mb, requests={"memory_mb": memory_mb})
            assert response.status_code in (202, 422), response.text
            if response.status_code == 202:
                ids.append(response.json()["id"])
        states = []
        for sandbox_id in ids:
            got = httpx.get(f"{lab.api}/v1/sandboxes/{sandbox_id}", params={"wait_for": "running", "timeout": 60},
                            headers=lab.headers, timeout=90).json()
            states.append(got["state"])
        assert states.count("running") <= 1, f"two {memory_mb} MB sandboxes run on a {host_memtotal_mb()} MB host"
    finally:
        for sandbox_id in ids:
            httpx.delete(f"{lab.api}/v1/sandboxes/{sandbox_id}", params={"wait": "true"}, headers=lab.headers,
                         timeout=60)
    attack.contained()


def test_nodes_on_one_host_advertise_no_more_memory_than_it_has(attack, lab):
    nodes = httpx.get(f"{lab.platform['urls']['scheduler']}/v1/nodes", timeout=10,
                      headers=internal_headers(lab.platform)).json()
    here = [n for n in nodes if urllib.parse.urlparse(n["url"]).hostname in ("127.0.0.1", "localhost")]
    assert len(here) == len(lab.node_ids), nodes
    advertised = sum(n["memory_mb"] for n in here)
    assert advertised <= host_memtotal_mb(), f"nodes on this host advertise {advertised} MB of {host_memtotal_mb()}"
    attack.contained()


def test_yes_floods_are_capped_and_the_api_stays_responsive(attack, lab):
    sandbox = attack.sandbox(probe=False)
    results, errors = [], []

    def flood(script: str) -> None:
        try:
            results.append(attack.sh(sandbox, script, timeout_s=60))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=flood, args=(s,)) for s in ("yes", "yes >&2", "yes $(seq 1000)")]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    assert httpx.get(f"{lab.api}/healthz", timeout=10).status_code == 200
    assert time.monotonic() - started < 5, "the api answered slowly during the floods"
    streamed = 0
    last = None
    for chunk in sandbox.exec_stream(["sh", "-c", f": {attack.marker}; yes"], timeout_s=60):
        streamed += len(chunk.data or "")
        last = chunk
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    limit = 1024 * 1024
    for result in results:
        assert result.truncated and not result.timed_out, result
        assert len(result.stdout) <= limit and len(result.stderr) <= limit
    assert last is not None and last.type == "exit" and last.result.truncated
    assert streamed <= limit, f"{streamed} bytes streamed"
    assert sandbox.exec("echo fine").stdout == "fine\n"
    attack.contained()
    attack.end()


def test_huge_argv_env_and_stdin_get_no_5xx(attack, lab):
    sandbox = attack.sandbox(probe=False)
    url = f"{lab.api}/v1/sandboxes/{sandbox.id}/exec"
    bodies = [
        {"cmd": ["echo", "x" * (8 * MIB)]},
        {"cmd": ["true", *(["a"] * 200_000)]},
        {"cmd": "env | wc -c", "env": {f"V{i}": "y" * 100_000 for i in range(300)}},
        {"cmd": "wc -c", "stdin": "s" * (16 * MIB)},
        {"cmd": "x" * (4 * MIB)},
    ]
    for body in bodies:
        response = httpx.post(url, json=body, headers=lab.headers, timeout=120)
        assert response.status_code < 500, f"{json.dumps(body)[:80]}: {response.status_code} {response.text[:300]}"
    created = _create(lab, env={f"V{i}": "y" * 100_000 for i in range(256)})
    assert created.status_code < 500, created.text[:300]
    if created.status_code == 202:
        big = created.json()["id"]
        state = httpx.get(f"{lab.api}/v1/sandboxes/{big}", params={"wait_for": "running", "timeout": 60},
                          headers=lab.headers, timeout=90).json()["state"]
        assert state in ("running", "failed"), state
        httpx.delete(f"{lab.api}/v1/sandboxes/{big}", params={"wait": "true"}, headers=lab.headers, timeout=60)
    assert sandbox.exec("echo fine").stdout == "fine\n"
    attack.contained()
    attack.end()


def test_non_utf8_output_comes_back_intact(attack, lab):
    sandbox = attack.sandbox(probe=False)
    raw = b"\xff\xfe\x00\x80abc\xc3\x28\xed\xa0\x80\n"
    script = "printf '" + "".join(f"\\{b:03o}" for b in raw) + "'"
    body = {"cmd": ["sh", "-c", f"{script}; {script} >&2"], "output_encoding": "base64"}
    response = httpx.post(f"{lab.api}/v1/sandboxes/{sandbox.id}/exec", json=body, headers=lab.headers, timeout=60)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result.get("encoding") == "base64", result
    assert base64.b64decode(result["stdout"]) == raw and base64.b64decode(result["stderr"]) == raw, result
    streamed = httpx.post(f"{lab.api}/v1/sandboxes/{sandbox.id}/exec/stream", json=body, headers=lab.headers,
                          timeout=60)
    chunks = [json.loads(line) for line in streamed.text.splitlines() if line]
    out = b"".join(base64.b64decode(c["data"]) for c in chunks if c["type"] == "stdout")
    assert out == raw, chunks
    attack.contained()
    attack.end()
