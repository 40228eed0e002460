"""The api's packages import one way: no package imports one that imports it back, directly or
through others (issue 35: sandboxes↔admin, sandboxes↔snapshots and admin↔auth were such
circles). Every ``import`` of corral_api in its source is counted, at any depth of a module
(an import inside a function is still a dependency). A root module (``services.py``,
``deps.py``, ``limits.py`` ...) is a node of its own, as is each compat adapter."""

import ast
from pathlib import Path

import corral_api

ROOT = Path(corral_api.__file__).parent


def node_of(module: str) -> str:
    """``corral_api.sandboxes.service`` → ``sandboxes``; ``corral_api.compat.e2b.envd`` → ``compat.e2b``."""
    parts = module.split(".")[1:]
    if parts[:1] == ["compat"] and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0] if parts else "corral_api"


def module_name(path: Path) -> str:
    relative = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names.add(target)
            # `from corral_api import metrics` names a module, not a name in a module
            names.update(f"{target}.{alias.name}" for alias in node.names
                         if (ROOT.parent / target.replace(".", "/") / f"{alias.name}.py").exists())
    return {n for n in names if n == "corral_api" or n.startswith("corral_api.")}


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        module = module_name(path)
        source = node_of(module)
        edges = graph.setdefault(source, set())
        for target in imported(ast.parse(path.read_text(), str(path)), module, path.name == "__init__.py"):
            if node_of(target) != source and target != "corral_api":
                edges.add(node_of(target))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_the_domains_and_their_imports():
    graph = package_graph()
    assert {"sandboxes", "snapshots", "admin", "auth", "quotas", "tenants", "dataplane", "compat.e2b"} <= set(graph)
    assert "sandboxes" in graph["snapshots"] and "quotas" in graph["sandboxes"] and "tenants" in graph["auth"]


def test_a_cycle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_api_packages_import_one_way():
    found = cycles(package_graph())
    assert found == [], "api packages that import each other (move the shared part into its own domain): " + \
        "; ".join(" ↔ ".join(c) for c in found)
