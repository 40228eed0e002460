"""fncall: model-written code run as one-shot bwrap sandboxes from the node-agents' warm pools,
driven through the public /v1/fncall API. The probe (probe.c) is sent as the "c" runtime's
source; every test case is one attempt in a fresh sandbox."""

import base64
from pathlib import Path

import httpx
import pytest

import corral
from tests import live_platform
from tests.live_platform import agent_pid
from tests.polling import until_sync
from tests.security.harness import host_ip, host_shmem_mb, mountinfo_naming, node_paths, probe_result

PROBE_SOURCE = (Path(__file__).parent / "probe.c").read_text()
SYSCALLS = ("io_uring_setup", "socket_vsock", "socket_packet", "keyctl", "add_key", "request_key", "unshare_user",
            "unshare_mount", "bpf", "perf_event_open", "userfaultfd", "mount", "open_by_handle_at", "init_module")


@pytest.fixture(scope="module")
def run(lab):
    platform = live_platform.fncall_ready(lab.platform)

    def call(runtime: str, code: str, api_key: str | None = None, **kwargs) -> dict:
        return corral.fncall(runtime, code, url=platform["api"], api_key=api_key or platform["api_key"], **kwargs)

    return call


@pytest.fixture(scope="module")
def syscall_results(run) -> dict[str, str]:
    """Every syscall attempt of SYSCALLS, each in a run of its own (one compile)."""
    result = run("c", PROBE_SOURCE, tests=[{"stdin": f"sys {name}"} for name in SYSCALLS])
    assert result["compile"]["verdict"] == "accepted", result["compile"]
    return {name: probe_result(case["stdout"], name) for name, case in zip(SYSCALLS, result["cases"], strict=True)}


@pytest.mark.parametrize("name", SYSCALLS)
def test_fncall_syscall_is_refused(attack, syscall_results, name):
    assert syscall_results[name] != "OK", f"{name} works in an fncall run"
    attack.contained()


def test_fncall_network_reaches_nothing(attack, run, lab):
    urls = [*lab.platform["urls"].values(), lab.platform["redis_url"], lab.platform["amqp_url"]]
    ports = [httpx.URL(url).port for url in urls]
    targets = [f"tcp 127.0.0.1 {p}" for p in ports] + [f"tcp {host_ip()} {p}" for p in ports]
    targets += ["tcp 1.1.1.1 53", "vsock 2 22", "vsock 1 22"]
    result = run("c", PROBE_SOURCE, tests=[{"stdin": t} for t in targets], time_limit_ms=5000)
    outcomes = [case["stdout"].strip() for case in result["cases"]]
    assert len(outcomes) == len(targets) and all(outcomes), outcomes
    assert not [o for o in outcomes if o.endswith(" OK")], f"reached from an fncall run: {outcomes}"
    attack.contained()


def _fncall_pids(lab) -> list[int]:
    """This platform's processes in fncall worker cgroups: descendants of its node-agents (other
    platforms on the host use the same cgroup names), zygotes excluded (they stay warm)."""
    parents = {}
    for proc in Path("/proc").iterdir():
        try:
            parents[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (ValueError, OSError, IndexError):
            continue
    agents = {agent_pid(lab.platform, node_id) for node_id in lab.node_ids}
    found = []
    for pid in parents:
        ancestor = parents.get(pid)
        while ancestor and ancestor not in agents:
            ancestor = parents.get(ancestor)
        if not ancestor:
            continue
        try:
            cgroup = next(line for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines() if ":pids:" in line)
        except (OSError, StopIteration):
            continue
        if "/corral-fncall/" in cgroup and not cgroup.endswith(".zygote"):
            found.append(pid)
    return found


def test_fncall_fork_bomb_is_stopped_and_leaves_nothing(attack, run, lab):
    result = run("bash", f": {attack.marker}; b() {{ b | b & }}; b; sleep 5", time_limit_ms=2000)
    assert result["verdict"] != "accepted", result["verdict"]
    until_sync(lambda: not _fncall_pids(lab), timeout_s=30, what="the bomb's processes to be gone")
    assert run("python", "print(6 * 7)")["cases"][0]["stdout"] == "42\n"
    attack.contained()


def test_fncall_output_flood_is_cut(attack, run):
    result = run("bash", "yes", output_limit_kb=16)
    assert result["verdict"] == "output_limit_exceeded"
    assert len(result["cases"][0]["stdout"]) <= 16 * 1024
    attack.contained()


def test_fncall_tmpfs_fill_stays_in_the_run(attack, run):
    before = host_shmem_mb()
    code = "f = open('/work/fill', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20))\n"
    result = run("python", code, memory_limit_mb=64, time_limit_ms=10000)
    assert result["verdict"] in ("memory_limit_exceeded", "runtime_error"), result["verdict"]
    assert host_shmem_mb() - before < 32, "an fncall run's files stayed in host memory"
    attack.contained()


@pytest.mark.parametrize("name", ["../escape.txt", "/etc/escape.txt", "a/../../escape.txt", "a\0b"])
def test_fncall_files_cannot_be_placed_outside_the_work_dir(attack, lab, run, name):
    body = {"runtime": "bash", "code": "ls", "files": {name: base64.b64encode(b"x").decode()}}
    response = httpx.post(f"{lab.api}/v1/fncall", json=body, headers=lab.headers, timeout=60)
    assert 400 <= response.status_code < 500, response.text
    attack.contained()


def test_nothing_of_one_run_reaches_the_next_or_another_tenant(attack, run):
    from tests.live_platform import OTHER_TENANT_KEY

    plant = (f"echo {attack.marker} > /tmp/{attack.marker}; echo {attack.marker} > /work/{attack.marker}; "
             f"(sleep 60 {attack.marker} &); ./probe 2>/dev/null; echo planted")
    assert run("bash", plant)["cases"][0]["stdout"] == "planted\n"
    look = "ls -a /tmp /work; ps -eo args 2>/dev/null || ls /proc; cat /proc/keys 2>/dev/null; true"
    for key in (None, OTHER_TENANT_KEY):
        seen = run("bash", look, api_key=key, tests=[{"stdin": ""}] * 4)
        for case in seen["cases"]:
            assert attack.marker not in case["stdout"], case["stdout"]
    attack.contained()


def test_fncall_runs_read_no_host_wide_proc_files(attack, run):
    host_cmdline = Path("/proc/cmdline").read_text().strip()
    script = ("cat /proc/cmdline; echo; for f in /proc/kpageflags /proc/kpagecgroup /proc/slabinfo /proc/config.gz; do "
              "head -c 4096 $f 2>/dev/null | wc -c; done; ls -A /sys/kernel/mm 2>/dev/null | wc -l")
    lines = run("bash", script)["cases"][0]["stdout"].splitlines()
    assert host_cmdline not in lines[0], "an fncall run reads the host's kernel command line"
    assert lines[-5:] == ["0"] * 5, f"bytes read from kpageflags, kpagecgroup, slabinfo, config.gz; mm: {lines[-5:]}"
    attack.contained()


@pytest.mark.parametrize("runtime", ["bash", "c"])
def test_fncall_mountinfo_names_no_path_of_the_node(attack, run, lab, runtime):
    """(c: a compiled run, whose work dir is a host dir bound in)"""
    code = {"bash": "cat /proc/self/mountinfo",
            "c": '#include <stdio.h>\nint main(void){FILE*f=fopen("/proc/self/mountinfo","r");int c;'
                 'while((c=fgetc(f))!=EOF)putchar(c);return 0;}'}[runtime]
    result = run(runtime, code)
    seen = result["cases"][0]["stdout"]
    assert " / " in seen, result  # (what is looked at is the mount table)
    named = mountinfo_naming(seen, node_paths(lab.platform))
    assert not named, f"an fncall run's mountinfo names paths of the node: {named}"
    attack.contained()
