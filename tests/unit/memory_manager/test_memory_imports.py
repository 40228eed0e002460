"""The memory-manager imports no other service's code: what it shares with the node-agent (the
cgroup drivers and the node's cgroup tree) comes from the host library, corral_host."""

from pathlib import Path

import corral_memory_manager
from tests.imports import SERVICES, service_imports

PACKAGE = Path(corral_memory_manager.__file__).parent
OTHER_SERVICES = tuple(s for s in SERVICES if s != "corral_memory_manager")


def test_no_module_of_the_memory_manager_imports_another_service():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 10  # the walk found the package
    found = service_imports(PACKAGE, OTHER_SERVICES)
    assert not found, found


def test_the_memory_manager_does_not_depend_on_the_node_agent_package():
    pyproject = (PACKAGE.parent / "pyproject.toml").read_text()
    assert "corral-node-agent" not in pyproject and "corral-host" in pyproject
