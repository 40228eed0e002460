"""libs/common by role (contracts/, store/, web/): the Redis key layout stays the store's own,
and no module of corral_common imports another in a circle (the errors ↔ guards ↔ overload one
was hidden behind function-local imports)."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
COMMON = ROOT / "libs" / "common" / "corral_common"
SERVICES = ROOT / "services"

# Keys of the shared store (corral_common/store): records, nodes, reservations, jobs, the
# quota ledger's counters. A key has no blank after its colon, unlike prose ("jobs: what...").
STORE_KEY = re.compile(r"^(sb|job|jobs|node|resv):\S|^quota:(used|entries):")
# The nodes zset, named as the first argument of a Redis command.
ZSET_COMMANDS = {"zadd", "zrem", "zscore", "zrangebyscore", "zrange", "zcard", "delete", "exists"}


def _key_literals(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and STORE_KEY.match(node.value):
            yield node.lineno, node.value
        elif isinstance(node, ast.JoinedStr) and node.values:  # f"sb:{sid}"
            head = node.values[0]
            if isinstance(head, ast.Constant) and isinstance(head.value, str) and STORE_KEY.match(head.value + "x"):
                yield node.lineno, head.value + "{...}"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ZSET_COMMANDS
              and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "nodes"):
            yield node.lineno, "nodes"


def test_no_service_spells_a_key_of_the_shared_store():
    found = []
    for path in sorted(SERVICES.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        found += [f"{path.relative_to(ROOT)}:{line}: {key}" for line, key in _key_literals(ast.parse(path.read_text()))]
    assert found == [], "read and write these through the stores of corral_common.store:\n" + "\n".join(found)


def test_the_check_finds_a_raw_key():
    tree = ast.parse('r.hget(f"sb:{sid}", "state")\nr.sadd("jobs:submitting", j)\nr.zadd("nodes", {n: 1}, xx=True)\n'
                     '"""jobs: a docstring"""')
    assert sorted(key for _, key in _key_literals(tree)) == ["jobs:submitting", "nodes", "sb:{...}"]


def _module(path: Path) -> str:
    return ".".join(path.with_suffix("").relative_to(COMMON.parent).parts).removesuffix(".__init__")


def _imports(path: Path) -> set[str]:
    """Every corral_common module ``path`` imports, at module level or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("corral_common"):
            if node.module == "corral_common":
                out |= {f"corral_common.{alias.name}" for alias in node.names}
            else:
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names if alias.name.startswith("corral_common")}
    return out


def test_no_module_of_corral_common_imports_itself_back():
    graph = {_module(p): _imports(p) for p in COMMON.rglob("*.py")}
    cycles, done = [], set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            cycles.append(path[path.index(module):] + [module])
            return
        if module in done:
            return
        for dep in sorted(graph.get(module, ())):
            visit(dep, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    assert cycles == []


def test_the_error_types_import_nothing_that_installs_them():
    assert not {m for m in _imports(COMMON / "web" / "errors.py") if m.startswith("corral_common.web.")}
