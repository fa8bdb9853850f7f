"""The package's import graph: no circle, and the layers only import downwards.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_import_graph.py

Reads every module's imports with `ast` (those inside functions too: a lazy import still ties two modules
together), so it needs no import of the package and runs in well under a second.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "grpo_playground"
# Layer -> packages it must never import: the UI and the UI-side job control run in the app process, which never
# imports the training stack; nothing imports up into the UI.
FORBIDDEN = {
    "ui": ("training",),
    "jobs": ("training", "ui"),
    "rewards": ("doctor",),  # the doctor reads rewards' scores; the design check shares contracts.Finding instead
    "*": ("ui",),
}
CHECKOUT_ONLY = ("pipelines", "benchmarks")  # not in the wheel: the installed package must never import them


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the package's modules it imports (`from pkg import sub` counts as pkg.sub when sub is a module)."""
    files = {module_name(p): p for p in (SRC / PACKAGE).rglob("*.py")}
    graph = {}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package upwards
                    anchor = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.add(sub if sub in files else base)
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def without_package_inits(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """A package's __init__ re-exporting its own submodules is not a circle of design: drop those arrows."""
    return {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in graph.items()}


def absolute_imports(path: Path) -> list[str]:
    """The modules a file imports by absolute name (`import a.b`, `from a.b import c` -> a.b)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.append(node.module or "")
    return names


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_import_graph_has_no_circle():
    cycle = find_cycle(without_package_inits(import_graph()))
    assert cycle is None, (f"import circle: {' -> '.join(cycle)}. Move the shared piece into the lower module (or a "
                           "new one both import), so that imports run one way")


def test_no_layer_imports_what_it_must_not():
    arrows = []
    for module, targets in import_graph().items():
        for target in targets:
            banned = FORBIDDEN.get(layer(module), ()) + (FORBIDDEN["*"] if layer(module) != "ui" else ())
            if layer(target) in banned:
                arrows.append(f"{module} -> {target}")
    assert not arrows, ("forbidden imports (the UI and jobs/ run in the app process and never import training/; "
                        f"nothing imports up into ui/): {sorted(arrows)}")


def test_the_package_imports_nothing_that_only_a_checkout_has():
    found = [f"{path.relative_to(SRC)}: {name}" for path in (SRC / PACKAGE).rglob("*.py")
             for name in absolute_imports(path) if name.split(".")[0] in CHECKOUT_ONLY]
    assert not found, f"the installed package has no pipelines/ or benchmarks/: move what these need into it: {found}"


def test_the_contracts_layer_imports_only_itself_and_the_standard_library():
    found = [f"{path.name}: {name}" for path in (SRC / PACKAGE / "contracts").rglob("*.py")
             for name in absolute_imports(path)
             if name.split(".")[0] not in sys.stdlib_module_names and not name.startswith(f"{PACKAGE}.contracts")]
    assert not found, ("grpo_playground.contracts is the bottom layer (pure data, standard library only): move "
                       f"what these imports need into it, or the code out of it: {found}")


def test_the_checker_sees_a_circle_and_a_forbidden_arrow():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    graph = import_graph()
    assert "grpo_playground.ui.app" in graph and graph["grpo_playground.ui.app"], "the parser found no imports"
