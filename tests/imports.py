"""What a package's modules import, read from their source (the layering tests)."""

import ast
from pathlib import Path

SERVICES = ("corral_api", "corral_scheduler", "corral_node_agent", "corral_image_service", "corral_memory_manager")


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports absolutely, at any depth (a function-local import counts too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def service_imports(package: Path, services: tuple[str, ...] = SERVICES) -> set[str]:
    """``<module>: <imported>`` for each import of one of ``services`` by a module of ``package``."""
    return {f"{path.relative_to(package)}: {name}" for path in sorted(package.rglob("*.py"))
            for name in imported_modules(path) if name.split(".")[0] in services}
