"""fncall on a lazily loaded runtime root outlives the lazy-layer server that serves it.

A node's fncall pools run on the "judge" environment, which on a lazy node is an EROFS mount of
a file of the lazy-layer server. Here the real pieces run in this process as in an agent: a
LayerCache (lazy) on a fake image-service, FncallPools with real bubblewrap workers (python with
its zygote, bash cold) on the shared RabbitMQ, called through the api's RPC. The root is a small
tree made from this host's python3 and bash (the judge tree is GBs). Needs root, /dev/fuse,
bubblewrap and cgroups.
"""

import asyncio
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from corral_api.fncall.rpc import FncallRpc
from corral_common.contracts.fncall import FncallJob
from corral_host.cgroups.detect import cgroup_driver
from corral_host.cgroups.node import node_cgroup_path
from corral_node_agent.fncall.service import FncallPools
from corral_node_agent.fncall.settings import FncallNodeSettings
from tests.integration.node_agent.fake_image_service import FakeImageService
from tests.polling import exited
from tests.sandbox_host import fncall_host_problem

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="no /dev/fuse")

PYTHON = "/usr/bin/python3"
STDLIB = "/usr/lib/python3.11"
# What no call here imports: kept out of the tree to keep it small.
STDLIB_SKIP = ("site-packages", "dist-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
               "pydoc_data", "config-3.11-x86_64-linux-gnu")


def _install(root: Path, path: str) -> None:
    """Copy host file ``path`` into ``root`` at the same place, with the symlinks that lead to it."""
    p = Path(os.path.realpath(os.path.dirname(path))) / os.path.basename(path)  # /lib -> /usr/lib (usrmerge)
    dest = root / str(p).lstrip("/")
    if dest.exists() or dest.is_symlink():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    if p.is_symlink():
        target = os.readlink(p)
        dest.symlink_to(target)
        _install(root, target if target.startswith("/") else str(p.parent / target))
    else:
        shutil.copy2(p, dest)


def _libraries(paths: list[str]) -> set[str]:
    out = subprocess.run(["ldd", *paths], capture_output=True, text=True).stdout
    libs = set()
    for line in out.splitlines():
        words = line.split()
        if "=>" in words and len(words) > words.index("=>") + 1 and words[words.index("=>") + 1].startswith("/"):
            libs.add(words[words.index("=>") + 1])
        elif words and words[0].startswith("/") and not line.endswith(":"):  # (not a "file:" heading)
            libs.add(words[0])
    return libs


def build_python_tree(root: Path) -> None:
    """A judge-like root with only python3 (this host's, Debian's) and bash."""
    if not Path(STDLIB).is_dir():
        pytest.skip(f"no {STDLIB} on this host")
    root.mkdir()
    (root / "usr").mkdir()
    for d in ("bin", "sbin", "lib", "lib64"):
        if Path(f"/{d}").is_symlink():  # usrmerge, as in the judge tree
            (root / d).symlink_to(os.readlink(f"/{d}"))
    for d in ("proc", "dev", "tmp", "work", "sys", "etc"):
        (root / d).mkdir(exist_ok=True)
    os.chmod(root / "tmp", 0o1777)
    shutil.copytree(STDLIB, root / STDLIB.lstrip("/"), symlinks=True, ignore=lambda d, names: [
        n for n in names if n in STDLIB_SKIP])
    programs = [os.path.realpath(PYTHON), os.path.realpath("/bin/bash")]
    modules = [str(p) for p in Path(f"{STDLIB}/lib-dynload").glob("*.so")]
    for path in [PYTHON, "/bin/bash", *programs, *_libraries(programs + modules)]:
        _install(root, path)


@pytest.fixture(scope="module")
def judge_service(work_dir):
    reason = fncall_host_problem()
    if reason:
        pytest.skip(reason)
    svc = FakeImageService(f"{work_dir}/fncall-image-service")
    tree = Path(f"{work_dir}/fncall-judge-tree")
    build_python_tree(tree)
    svc.environments["judge"] = [svc.add_tree("judge", str(tree))]
    server = svc.serve()
    yield svc
    server.shutdown()


@pytest.fixture
async def lazy_pools(judge_service, layer_caches, amqp_url, tmp_path):
    """FncallPools (python with its zygote, bash) on a lazy LayerCache, ready; then closed."""
    node = f"fnlazy-{uuid.uuid4().hex[:6]}"
    cache = layer_caches(judge_service.url)
    settings = FncallNodeSettings(runtimes="python,bash", pool_min=1, pool_max=1, rootfs_poll_s=0.2,
                                  cache_dir=str(tmp_path / "cache"), scratch_dir=f"/dev/shm/corral-{node}")
    pools = FncallPools(node, amqp_url, settings, instance=uuid.uuid4().hex[:6], layers=cache)
    await pools.start()
    try:
        deadline = time.monotonic() + 60
        while pools.status_message != "ready":
            assert time.monotonic() < deadline, pools.status_message
            await asyncio.sleep(0.05)
        yield pools, cache
    finally:
        await pools.close()
        cgroup_driver().cgroup(node_cgroup_path(node)).remove()
        shutil.rmtree(settings.scratch_dir, ignore_errors=True)


@pytest.fixture
async def rpc(amqp_url):
    client = await FncallRpc(amqp_url, ("python", "bash")).connect()
    yield client
    await client.close()


def _job(runtime: str, code: str) -> FncallJob:
    return FncallJob(call_id=uuid.uuid4().hex, runtime=runtime, code=code, cases=[{"stdin": ""}])


async def _answers(rpc, runtime: str, code: str, want: str, timeout_s: float) -> list:
    """Call until the call is answered ``want`` (every answer, in order); fails after ``timeout_s``."""
    seen = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = await rpc.call(runtime, _job(runtime, code), timeout_s=20)
        seen.append(result)
        if result.verdict == "accepted" and result.cases[0].stdout == want:
            return seen
        await asyncio.sleep(0.1)
    pytest.fail(f"{runtime} never answered {want!r} within {timeout_s}s: {[(r.verdict, r.message) for r in seen]}")


async def test_fncall_serves_again_after_its_lazy_layer_server_is_killed(lazy_pools, rpc):
    pools, cache = lazy_pools
    [judge] = cache.lazy.indexes  # the root is a lazily loaded layer
    zygote = pools.pools["python"]._workers["python-0"]
    await _answers(rpc, "python", "print(6 * 7)", "42\n", timeout_s=30)
    await _answers(rpc, "bash", "echo $((6 * 7))", "42\n", timeout_s=30)
    assert zygote.zygote_runs >= 1, "the python call did not run in the zygote"

    # A call in flight on the root when its server dies: answered at once, clearly, not judged.
    slow = asyncio.create_task(rpc.call("python", _job("python", "import time; time.sleep(8); print('late')"),
                                        timeout_s=30))
    deadline = time.monotonic() + 10
    while pools.pools["python"].busy == 0:
        assert time.monotonic() < deadline, "the slow call never started"
        await asyncio.sleep(0.02)
    pid = cache.lazy.server.pid
    os.kill(pid, signal.SIGKILL)
    assert await asyncio.to_thread(exited, pid)
    killed_at = time.monotonic()
    result = await slow
    assert time.monotonic() - killed_at < 5, "the call on the lost root ran to its end"
    assert result.verdict == "system_error" and "no worker" in result.message, result
    assert "went away during the run" in result.message

    # Without an agent restart: the same pools mount the root from a new server and serve again
    # (python from a new zygote). Meanwhile a call may be held or answered "no worker" (retryable),
    # never judged on the dead root.
    python = await _answers(rpc, "python", "print(6 * 7)", "42\n", timeout_s=30)
    bash = await _answers(rpc, "bash", "echo $((6 * 7))", "42\n", timeout_s=30)
    for r in python[:-1] + bash[:-1]:
        assert r.verdict == "system_error" and "no worker" in r.message, r
    assert cache.lazy.server.pid not in (None, pid)
    assert judge in cache.lazy.indexes, "the root is not on the new server"
    assert pools.status_message == "ready"
    assert zygote.zygote_starts >= 2 and zygote.is_warm()
    # Files of the root no call read before read right from the new server.
    code = "import json, sqlite3, email.mime.text, xml.dom.minidom; print('ok')"
    await _answers(rpc, "python", code, "ok\n", timeout_s=30)
