"""The security suite: hostile tenants against the live platform (tests/live_platform.py).

Its tests share the e2e suite's platform and xdist group ("e2e"), so one worker runs both on
one set of ports. Needs root, crun, QEMU (microvm attempts) and gcc with a static libc (the
attacker's probe); without them the tests skip and say why.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.live_platform import OTHER_TENANT_KEY, platform_missing
from tests.security.harness import Attack, Lab

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    reason = platform_missing()
    for item in items:
        if str(item.fspath).startswith(str(HERE)):
            item.add_marker(pytest.mark.xdist_group("e2e"))
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def probe(tmp_path_factory) -> bytes:
    """The attacker's toolbox (probe.c), linked static so it runs in any sandbox."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the attacker's probe")
    out = tmp_path_factory.mktemp("probe") / "probe"
    built = subprocess.run(["gcc", "-static", "-Os", "-s", "-o", str(out), str(HERE / "probe.c")],
                           capture_output=True, text=True)
    if built.returncode != 0:
        pytest.fail(f"building the probe failed (needs a static libc, libc6-dev):\n{built.stderr[-2000:]}")
    return out.read_bytes()


@pytest.fixture(scope="session")
def lab(platform, probe):
    from corral import Corral

    with Corral(platform["api"], platform["api_key"]) as attacker, Corral(platform["api"], OTHER_TENANT_KEY) as other:
        lab = Lab(platform, attacker, other, probe)
        try:
            yield lab
        finally:
            lab.close()


@pytest.fixture
def attack(lab):
    attempt = Attack(lab)
    try:
        yield attempt
    finally:
        attempt.cleanup()


@pytest.fixture(scope="module")
def shell(lab):
    """One attacker sandbox (with the probe) shared by a module's attempts that leave it as they
    found it; the module's last test ends it and checks what it left."""
    sandbox = lab.create(memory_mb=64)
    lab.upload_probe(sandbox)
    yield sandbox
    lab.delete_quietly(sandbox)
