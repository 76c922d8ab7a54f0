"""server/ is layered: imports only run down (api -> plan -> responses -> chat -> structured -> engine; base modules
below the feature packages, the engine adapter below them, and leaf utilities such as server.lru, which import
nothing of the server, at the very bottom)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SERVER = Path(__file__).resolve().parents[2] / "server"
TOP = {"server.runner", "server.api_servers", "server.__main__"}  # the process: builds everything
RANKS = {"server.api": 6, "server.plan": 5, "server.responses": 4, "server.chat": 3, "server.structured": 2,
         "server.engine": 0, "server.lru": -1, "server.histogram": -1,
         "server.json_types": -1, "server.ids": -1, "server.loop_budget": -1}
BASE = 1  # config, errors, logs, metrics, protocol, state, default_model


def _module(path: Path) -> str:
    parts = list(path.relative_to(SERVER.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _rank(module: str) -> int:
    if module in TOP:
        return 7
    for prefix, rank in RANKS.items():
        if module == prefix or module.startswith(prefix + "."):
            return rank
    return BASE


def _type_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (annotations only: never run)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            found |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return found


def _imports(path: Path, *, runtime_only: bool = False) -> list[str]:
    tree = ast.parse(path.read_text())
    package = _module(path).split(".") if path.name == "__init__.py" else _module(path).split(".")[:-1]
    skip = _type_only(tree) if runtime_only else set()
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.level:  # relative: resolve against the package
            base = package[: len(package) - (node.level - 1)]
            out.append(".".join(base + ([node.module] if node.module else [])))
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names]
    return [m for m in out if m == "server" or m.startswith("server.")]


MODULES = sorted(SERVER.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[_module(p) for p in MODULES])
def test_imports_run_down(path: Path) -> None:
    """At run time. A type named under ``if TYPE_CHECKING:`` may come from any layer (the per-process
    state is typed with the objects the layers above build on it)."""
    me = _module(path)
    up = [m for m in _imports(path, runtime_only=True) if _rank(m) > _rank(me)]
    assert not up, f"{me} imports from a higher layer: {up}"


@pytest.mark.parametrize("path", MODULES, ids=[_module(p) for p in MODULES])
def test_no_module_over_600_lines(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= 600, path


def _graph() -> dict[str, set[str]]:
    """Module -> the server modules it names, type-only imports included (a circle drawn by types
    is still a circle a reader walks)."""
    names = {_module(p) for p in MODULES}
    graph: dict[str, set[str]] = {}
    for path in MODULES:
        targets = set()
        for imported in _imports(path):
            while imported and imported not in names:  # ``from server.x import y`` names module x
                imported = imported.rpartition(".")[0]
            if imported and imported != _module(path):
                targets.add(imported)
        graph[_module(path)] = targets
    return graph


def test_the_house_draws_no_circles() -> None:
    graph = _graph()
    circles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt.startswith("server") and nxt.endswith("__init__"):
                continue
            if state.get(nxt) == 1:
                circles.append(path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not circles, circles
