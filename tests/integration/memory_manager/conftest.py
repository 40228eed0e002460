"""Real-crun fixtures for the reclaim tests: the node-agent integration tests' own (private mount
namespace entered at import, busybox EROFS layer, per-session node id), plus a zram swap."""

import subprocess

import pytest
import pytest_asyncio

from tests.integration.node_agent.conftest import (  # noqa: F401 - fixtures
    SKIP_REASON,
    base_layer,
    erofs_image,
    node_id,
    state_dir,
    work_dir,
)


@pytest.fixture(scope="session")
def zram_swap():
    """A zram swap for the session (the one found active, or one made here and removed after)."""
    if SKIP_REASON:
        pytest.skip(SKIP_REASON)
    from corral_memory_manager.reclaim.zram import ensure_zram_swap, remove_zram

    try:
        swap = ensure_zram_swap(1 << 30)
    except (OSError, subprocess.CalledProcessError) as exc:  # no zram-control, no mkswap: nothing to test against
        pytest.skip(f"cannot set up a zram swap here: {exc}")
    yield swap
    if swap.created:
        remove_zram(swap.device.removeprefix("/dev/zram"))


@pytest_asyncio.fixture
async def backend(state_dir, node_id, base_layer):  # noqa: F811 - the imported fixtures
    from corral_node_agent.backends.container import ContainerBackend
    from corral_node_agent.settings import NodeAgentSettings

    b = ContainerBackend(NodeAgentSettings(node_id=node_id, state_dir=state_dir))
    yield b
    await b.close()


from tests.integration.node_agent.vm.conftest import guestkit_dir, layers  # noqa: E402, F401 - fixtures
