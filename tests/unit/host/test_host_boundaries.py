"""The host library is the bottom layer: it imports no service (the node-agent and the
memory-manager both build on it), and a module run as a program of its own is named
``*_main.py``."""

import ast
from pathlib import Path

import corral_host
from tests.imports import service_imports

PACKAGE = Path(corral_host.__file__).parent


def test_the_host_library_imports_no_service():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert {"mounts.py", "namespaces.py", "netns.py", "userns.py"} <= {p.name for p in modules}
    found = service_imports(PACKAGE)
    assert not found, found


def test_programs_of_their_own_are_named_main():
    """A module with an ``if __name__ == "__main__"`` block is a program: its name says so."""
    import corral_node_agent

    programs = set()
    for package in (PACKAGE, Path(corral_node_agent.__file__).parent):
        for path in package.rglob("*.py"):
            tree = ast.parse(path.read_text(), str(path))
            if any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in tree.body):
                programs.add(path.relative_to(package.parent).as_posix())
    assert programs >= {"corral_host/userns_main.py", "corral_node_agent/network/egress_main.py",
                        "corral_node_agent/layers/lazy/server_main.py", "corral_node_agent/fncall/zygote_main.py"}
    misnamed = {p for p in programs if not p.endswith(("_main.py", "/__main__.py"))}
    assert not misnamed, misnamed
