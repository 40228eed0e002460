"""The memory-manager imports no other service's code: what it shares with the node-agent (the
cgroup drivers and the node's cgroup tree) comes from the host library, corral_host."""

import ast
from pathlib import Path

import corral_memory_manager

PACKAGE = Path(corral_memory_manager.__file__).parent
SERVICES = ("corral_api", "corral_scheduler", "corral_node_agent", "corral_image_service")


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (a function-local import counts too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_no_module_of_the_memory_manager_imports_another_service():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 10  # the walk found the package
    found = {f"{path.relative_to(PACKAGE)}: {name}" for path in modules for name in imported_modules(path)
             if name.split(".")[0] in SERVICES}
    assert not found, found


def test_the_memory_manager_does_not_depend_on_the_node_agent_package():
    pyproject = (PACKAGE.parent / "pyproject.toml").read_text()
    assert "corral-node-agent" not in pyproject and "corral-host" in pyproject
