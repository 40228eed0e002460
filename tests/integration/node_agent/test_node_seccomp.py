"""The container-default syscall profile and the /proc masks, in real crun containers; and
both profiles' BPF programs under host root (where only the filter can refuse a call)."""

import base64
import json
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
import pytest_asyncio

from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.sandboxes import SandboxSpec
from corral_node_agent.backends.container import ContainerBackend, bundle, oci
from corral_node_agent.backends.container.crun import Crun
from corral_node_agent.backends.container.shared_mounts import SharedMounts
from corral_node_agent.backends.types import RootFs
from corral_node_agent.isolation.policy import policy_for
from corral_node_agent.isolation.seccomp import CONTAINER_DEFAULT, FNCALL_DEFAULT, LINEAR, TREE
from corral_node_agent.settings import NodeAgentSettings
from tests.polling import until
from tests.syscall_probe import build_probe, errnos, expected, probe_input

SIGSYS_EXIT = 128 + signal.SIGSYS
# Only the namespaces' own: nothing a call let through by mistake could touch the host.
CONTAINED = ["unshare", "--mount", "--uts", "--ipc", "--net", "--pid", "--fork", "setsid"]


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Path:
    return build_probe(tmp_path_factory.mktemp("probe"))


@pytest_asyncio.fixture
async def sandbox(state_dir, node_id, base_layer, probe):
    backend = ContainerBackend(NodeAgentSettings(node_id=node_id, state_dir=state_dir))
    sid = "sc-" + uuid.uuid4().hex[:10]
    await backend.start(sid, SandboxSpec(environment="busybox", memory_mb=128, disk_mb=64, pids_limit=64),
                        RootFs([base_layer]))
    await backend.write_file(sid, "/usr/bin/syscall-probe", probe.read_bytes(), mode=0o755)
    yield backend, sid
    await backend.close()


def run(cmd, **kw) -> ExecRequest:
    return ExecRequest(cmd=cmd, timeout_s=20, **kw)


@pytest.mark.parametrize("user", ["user", "root"])
async def test_container_calls_get_the_profiles_errno(sandbox, user):
    backend, sid = sandbox
    r = await backend.exec(sid, run(["syscall-probe"], stdin=probe_input(), user=user))
    assert r.exit_code == 0, r.stderr
    assert errnos(r.stdout) == expected("container")


async def test_container_32bit_syscalls_kill_and_every_process_is_filtered(sandbox):
    backend, sid = sandbox
    r = await backend.exec(sid, run(["syscall-probe"], stdin="int80\n"))
    assert r.exit_code == SIGSYS_EXIT and "int80" not in r.stdout  # SIGSYS: bad architecture
    r = await backend.exec(sid, run("grep Seccomp: /proc/self/status"))
    assert r.stdout.split() == ["Seccomp:", "2"]

    async def init_filtered():  # (crun run -d may return just before the init installs it)
        return (await backend.exec(sid, run("grep Seccomp: /proc/1/status"))).stdout.split() == ["Seccomp:", "2"]

    await until(init_filtered, timeout_s=10, what="the init's seccomp filter")


async def test_container_normal_programs_still_work(sandbox):
    backend, sid = sandbox
    script = ("mkdir -p /tmp/d && cd /tmp/d && echo hello > f && ln -s f l && cat l | tr a-z A-Z && "
              "(sleep 0.05 & wait) && tar cf - f l | tar tf - | sort | tr '\\n' ' ' && echo && "
              "awk 'BEGIN { print 6 * 7 }' && id -u && date +%Y | grep -c '^20'")
    r = await backend.exec(sid, run(script))
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines() == ["HELLO", "f l ", "42", "1000", "1"]


async def test_container_host_tables_are_masked(sandbox):
    backend, sid = sandbox
    script = ("for f in /proc/kpageflags /proc/kpagecount /proc/kpagecgroup /proc/slabinfo /proc/cmdline /proc/keys "
              "/proc/timer_list; do [ -e $f ] && echo $f $(wc -c < $f); done; ls /proc/acpi | wc -l; "
              "echo 1 > /proc/sys/vm/drop_caches 2>/dev/null || echo sys: read-only")
    r = await backend.exec(sid, run(script, user="root"))
    got = r.stdout.splitlines()
    assert "/proc/cmdline 0" in got and "/proc/slabinfo 0" in got and "/proc/kpageflags 0" in got
    assert all(line.endswith(" 0") for line in got[:-2]), got  # every masked file reads empty
    assert got[-2:] == ["0", "sys: read-only"]


async def test_crun_compiles_the_profile_json_to_the_generators_program(state_dir, node_id, base_layer, tmp_path):
    """One rule list, two renderings: crun 1.8 takes config.json's linux.seccomp and compiles it
    to the very program the generator makes from the same JSON in the same (linear) layout.
    What the backend hands crun precompiled, and fncall loads, is the tree layout of the same
    rules (test_each_profile_refuses_even_host_root runs both)."""
    bundle_dir = Path(state_dir, "json-only")
    bundle_dir.mkdir(parents=True)
    sid = "scj-" + uuid.uuid4().hex[:8]
    settings = NodeAgentSettings(node_id=node_id, state_dir=state_dir)
    policy = policy_for(SandboxSpec(environment="busybox"), settings)
    disk_root = bundle_dir / "disk"  # (a directory here: only the config's compilation is looked at)
    disk_root.mkdir()
    bundle.populate_disk(str(disk_root), policy.identity)
    shared = SharedMounts.mount(f"{state_dir}/shared-json", settings.container_init)
    config = oci.build_config(sid, policy, env={}, node_id=node_id, disk_root=str(disk_root), shared=shared)
    assert "annotations" not in config and config["linux"]["seccomp"] == CONTAINER_DEFAULT.to_oci()
    config["root"] = {"path": base_layer, "readonly": True}
    (bundle_dir / "config.json").write_text(json.dumps(config))
    crun = Crun("crun", f"{state_dir}/crun-json")
    try:
        await crun.run_detached(sid, str(bundle_dir), pid_file=f"{bundle_dir}/pid", log_path=f"{bundle_dir}/log")
        try:
            compiled_by_crun = Path(crun.root, sid, "seccomp.bpf").read_bytes()
        finally:
            await crun.kill(sid)
            await crun.delete(sid)
    finally:
        shared.unmount()
    assert compiled_by_crun == CONTAINER_DEFAULT.to_bpf(tmp_path, optimize=LINEAR).read_bytes()


async def test_the_backend_hands_crun_the_compiled_profile(sandbox, tmp_path):
    backend, sid = sandbox
    config = json.loads(Path(backend.sandboxes_dir, sid, "config.json").read_text())
    assert "seccomp" not in config["linux"]
    program = base64.b64decode(config["annotations"][oci.SECCOMP_BPF_ANNOTATION])
    assert program == CONTAINER_DEFAULT.to_bpf(tmp_path).read_bytes()
    assert Path(backend.crun_root, sid, "seccomp.bpf").read_bytes() == program  # what crun exec installs


@pytest.mark.parametrize("layout", [LINEAR, TREE], ids=["linear", "tree"])
@pytest.mark.parametrize("kind,profile", [("container", CONTAINER_DEFAULT), ("fncall", FNCALL_DEFAULT)])
def test_each_profile_refuses_even_host_root(probe, tmp_path, kind, profile, layout):
    """As host root (every capability) nothing but the filter can refuse these calls: each row
    of the table gets the profile's errno, though unfiltered root gets another (checked too)."""
    unfiltered = subprocess.run([*CONTAINED, str(probe)], input=probe_input(), capture_output=True, text=True)
    filtered = subprocess.run([*CONTAINED, str(probe), str(profile.to_bpf(tmp_path, optimize=layout))], input=probe_input(),
                              capture_output=True, text=True)
    assert filtered.returncode == 0, filtered.stderr
    got, want, raw = errnos(filtered.stdout), expected(kind), errnos(unfiltered.stdout)
    assert got == want
    refused = [label for label, e in want.items() if e != raw[label]]
    assert len(refused) >= 70, raw  # the table is not vacuous: the filter changed these answers
