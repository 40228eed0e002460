"""The whole platform as processes (scripts/corral_platform.py, as `make up` runs it), driven by the SDK.

The platform itself lives in tests/live_platform.py (shared with tests/security); its
``platform`` and ``vm_platform`` fixtures are registered in tests/conftest.py.
Needs root, crun and mkfs.erofs (real containers on real EROFS + overlay mounts).
"""

from pathlib import Path

import pytest

from tests.live_platform import (  # noqa: F401 - re-exported: the e2e tests import them from here
    GUESTKIT_DIR,
    HEARTBEAT_TIMEOUT_S,
    OTHER_TENANT_KEY,
    QEMU,
    agent_pid,
    leftovers,
    platform_missing,
    runtime_id,
    vm_backends_missing,
)


def pytest_collection_modifyitems(config, items):
    """Every e2e test runs on one xdist worker (`--dist loadgroup`, group "e2e"), in collection
    order; a test marked ``breaks_platform`` leaves the shared platform damaged (a node
    killed), so it is moved after all the others."""
    here = str(Path(__file__).parent)
    reason = platform_missing()
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.xdist_group("e2e"))
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
    items.sort(key=lambda item: item.get_closest_marker("breaks_platform") is not None)  # stable


@pytest.fixture(scope="session")
def corral(platform):
    from corral import Corral

    with Corral(platform["api"], platform["api_key"]) as client:
        yield client
