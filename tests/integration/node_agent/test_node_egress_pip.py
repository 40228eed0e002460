"""pip through an operator preset: a Debian sandbox installs a wheel from a local package
index (pypiserver from PyPI, in a namespace the test makes) with the preset, and fails fast
without it. The Debian tree is the fncall runtime's (built once per machine, cached)."""

import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pip
import pytest
import pytest_asyncio

from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.sandboxes import SandboxSpec
from corral_node_agent.backends.container import ContainerBackend
from corral_node_agent.backends.types import RootFs
from corral_node_agent.settings import NodeAgentSettings
from tests.egress_upstream import make_upstream
from tests.polling import until_sync
from tests.wheels import build_wheel

pytestmark = pytest.mark.asyncio
ROOT = Path(__file__).resolve().parents[3]
INDEX = "index.corral.test"
PIP = ("python3 -m pip install --disable-pip-version-check --no-cache-dir --target /tmp/site "
       f"--index-url http://{INDEX}:8080/simple/ --trusted-host {INDEX} corral-egress-probe")


@pytest.fixture(scope="module")
def debian_tree() -> str:
    out = subprocess.run([sys.executable, str(ROOT / "scripts/build_fncall_runtime.py")], capture_output=True,
                         text=True, timeout=1800)
    if out.returncode != 0:
        pytest.skip(f"no Debian tree (scripts/build_fncall_runtime.py failed): {out.stderr[-500:]}")
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def pip_layer(work_dir) -> str:
    """pip itself (this venv's, pure Python) as a layer: Debian's python3 has no pip."""
    layer = Path(work_dir) / f"pip-layer-{uuid.uuid4().hex[:6]}"
    shutil.copytree(Path(pip.__file__).parent, layer / "usr/lib/python3/dist-packages/pip")
    return str(layer)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    packages = tmp_path_factory.mktemp("packages")
    build_wheel(packages)
    up = make_upstream(116)
    try:
        server = shutil.which("pypi-server") or str(Path(sys.executable).parent / "pypi-server")
        up.run([server, "run", "-p", "8080", "-i", up.address, str(packages)],
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def listening() -> bool:
            probe = ["ip", "netns", "exec", up.netns, sys.executable, "-c",
                     f"import urllib.request as u; u.urlopen('http://{up.address}:8080/simple/', timeout=1)"]
            return subprocess.run(probe, capture_output=True).returncode == 0
        until_sync(listening, timeout_s=30, what="pypiserver")
        yield up
    finally:
        up.close()


@pytest_asyncio.fixture
async def backend(state_dir, node_id, index):
    b = ContainerBackend(NodeAgentSettings(node_id=node_id, state_dir=state_dir, egress_pool=1,
                                           egress_hosts={INDEX: [index.address]},
                                           network_presets={"pypi": [f"{INDEX}:8080"]}))
    yield b
    await b.close()


async def pip_install(backend, layers, network) -> tuple[int, str, float]:
    sid = "p-" + uuid.uuid4().hex[:10]
    await backend.start(sid, SandboxSpec(environment="debian", memory_mb=512, disk_mb=256, network=network),
                        RootFs(layers))
    t0 = time.monotonic()
    r = await backend.exec(sid, ExecRequest(cmd=["sh", "-c", PIP + " && PYTHONPATH=/tmp/site python3 -c "
                                                 "'import corral_egress_probe as p; print(p.VALUE)'"],
                                            env={"PIP_RETRIES": "0", "PIP_TIMEOUT": "5"}, timeout_s=120))
    took = time.monotonic() - t0
    await backend.stop(sid)
    return r.exit_code, r.stdout + r.stderr, took


async def test_pip_install_with_the_preset_and_not_without(backend, debian_tree, pip_layer):
    layers = [pip_layer, debian_tree]
    code, out, _ = await pip_install(backend, layers, {"presets": ["pypi"]})
    assert code == 0 and "installed through the egress proxy" in out, out
    code, out, took = await pip_install(backend, layers, {"allow": []})
    assert code != 0 and "installed through" not in out
    assert took < 20, took  # refused at once (NXDOMAIN), not a timeout
    code, out, _ = await pip_install(backend, layers, "none")
    assert code != 0 and "installed through" not in out
