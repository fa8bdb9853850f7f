"""The package's import graph: no circle, and the layers only import downwards.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_import_graph.py

Reads every module's imports with `ast` (those inside functions too: a lazy import still ties two modules
together), so it needs no import of the package and runs in well under a second.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = "grpo_playground"
# Layer -> packages it must never import: the UI and the UI-side job control run in the app process, which never
# imports the training stack nor the eval and export children's code; nothing imports up into the UI.
FORBIDDEN = {
    "ui": ("training", "eval", "export"),
    "jobs": ("training", "ui", "eval", "export"),
    "rewards": ("doctor",),  # the doctor reads rewards' scores; the design check shares contracts.Finding instead
    "*": ("ui",),
}
CHECKOUT_ONLY = ("pipelines", "benchmarks")  # not in the wheel: the installed package must never import them
# The app process (ui/, jobs/) may import serving/ only through its entry point, and eval/ and export/ not at all:
# those are the child processes' internals (runner, engines, converters), loaded by the CLIs that jobs start. What an
# eval wrote is read by jobs.eval_results, its grading is rewards.grading; export is started through cli.args.
APP_ENTRY_POINTS = {
    f"{PACKAGE}.serving": "the chat servers: the app process owns the server pool",
}
CHILD_SIDE = ("eval", "export", "serving")


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC if path.is_relative_to(SRC) else ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_files() -> dict[str, Path]:
    """module -> file, for the package and the checkout's pipelines/ and benchmarks/."""
    roots = [SRC / PACKAGE] + [ROOT / name for name in CHECKOUT_ONLY]
    return {module_name(p): p for root in roots for p in root.rglob("*.py")}


def import_graph() -> dict[str, set[str]]:
    """module -> the modules (of the package, pipelines/, benchmarks/) it imports (`from pkg import sub` counts as
    pkg.sub when sub is a module)."""
    files = source_files()
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
    """ui, jobs, eval... for the package's modules; pipelines or benchmarks for the checkout's."""
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return parts[0]
    return parts[1] if len(parts) > 1 else ""


def loaded_with(graph: dict[str, set[str]], starts) -> set[str]:
    """Every module importing `starts` can load: imports (lazy ones too) and each module's parent packages, whose
    __init__ Python runs first."""
    seen, todo = set(), list(starts)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [*graph[module], *(p for i in range(1, len(parts)) if (p := ".".join(parts[:i])) in graph)]
    return seen


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
    assert not arrows, ("forbidden imports (the UI and jobs/ run in the app process and never import training/, "
                        "eval/ or export/: what an eval wrote is jobs.eval_results, its grading rewards.grading; "
                        f"nothing imports up into ui/): {sorted(arrows)}")


def test_the_app_imports_eval_export_and_serving_only_through_their_entry_points():
    graph = import_graph()
    app = [m for m in graph if layer(m) in ("ui", "jobs")]
    direct = sorted(f"{m} -> {t}" for m in app for t in graph[m]
                    if layer(t) in CHILD_SIDE and t not in APP_ENTRY_POINTS)
    assert not direct, (f"ui/ and jobs/ import eval/, export/, serving/ only through {sorted(APP_ENTRY_POINTS)}: "
                        f"import the name from one of them (add it there if it belongs to the app): {direct}")
    # An entry point's package __init__ runs first: it must not pull the internals back in (eval/__init__ once
    # re-exported the runner, so the app loaded the eval engines).
    reached = sorted(m for m in loaded_with(graph, app) if layer(m) in ("eval", "export")
                     and m not in APP_ENTRY_POINTS and m != f"{PACKAGE}.eval")
    assert not reached, f"the app process can load eval/export internals (through package __inits__?): {reached}"


def test_the_job_model_imports_no_kind_of_job():
    """One record and one supervisor for training, eval, export and comparison jobs: the kinds build on them, never
    the reverse (a kind's module there would make the supervisor of every job load it, and split the model again)."""
    graph = import_graph()
    kinds = {f"{PACKAGE}.jobs.{name}" for name in ("control", "evals", "exports", "comparisons")}
    core = [f"{PACKAGE}.jobs.{name}" for name in ("record", "supervisor", "run_status", "crash")]
    seen, todo = set(), list(core)
    while todo:  # what the core imports, transitively (not the package __init__s Python also runs)
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += graph[module]
    assert not seen & kinds, f"the job model imports a kind of job: {sorted(seen & kinds)}"
    assert not {m for m in seen if layer(m) in ("cli", "ui")}, "the job model needs no CLI (a kind builds its argv) or UI"


def test_the_graph_covers_pipelines_and_benchmarks():
    """So the circle and forbidden-arrow tests above (nothing imports ui/) hold for the checkout's tools too."""
    graph = import_graph()
    tools = sorted(m for m in graph if layer(m) in CHECKOUT_ONLY)
    assert "pipelines.experiments.seed_regime" in tools and "benchmarks.gpu_grpo" in tools, "the tools are unread"
    assert graph["pipelines.check_tiny_sft"], "imports of pipelines/ are unread"


def test_the_package_imports_nothing_that_only_a_checkout_has():
    found = [f"{path.relative_to(SRC)}: {name}" for path in (SRC / PACKAGE).rglob("*.py")
             for name in absolute_imports(path) if name.split(".")[0] in CHECKOUT_ONLY]
    assert not found, f"the installed package has no pipelines/ or benchmarks/: move what these need into it: {found}"


def test_the_contracts_layer_imports_only_itself_and_the_standard_library():
    above = sorted(f"{m} -> {t}" for m, ts in import_graph().items() if layer(m) == "contracts"
                   for t in ts if layer(t) != "contracts")
    assert not above, f"contracts/ imports nothing above it (relative imports included): {above}"
    found = [f"{path.name}: {name}" for path in (SRC / PACKAGE / "contracts").rglob("*.py")
             for name in absolute_imports(path)
             if name.split(".")[0] not in sys.stdlib_module_names and not name.startswith(f"{PACKAGE}.contracts")]
    assert not found, ("grpo_playground.contracts is the bottom layer (pure data, standard library only): move "
                       f"what these imports need into it, or the code out of it: {found}")


def test_the_run_layout_contract_imports_only_the_contracts():
    """run_layout is the run folder's contract that every process reads: it sits on contracts/ alone (a run's settings,
    which need the recipe loader, are config.run_settings), and it names what it takes (no `import *`)."""
    module = f"{PACKAGE}.run_layout"
    above = sorted(t for t in import_graph()[module] if layer(t) != "contracts")
    assert not above, f"run_layout imports only contracts/ and the standard library: {above}"
    tree = ast.parse((SRC / PACKAGE / "run_layout.py").read_text(encoding="utf-8"))
    stars = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
             and any(alias.name == "*" for alias in node.names)]
    assert not stars, f"run_layout re-exports with `import *` from {stars}: import each name from its home instead"


def test_the_checker_sees_a_circle_and_a_forbidden_arrow():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    graph = import_graph()
    assert "grpo_playground.ui.app" in graph and graph["grpo_playground.ui.app"], "the parser found no imports"
    assert loaded_with({"a.b.c": {"d"}, "a": set(), "a.b": {"e"}, "d": set(), "e": set()}, ["a.b.c"]) == {
        "a.b.c", "a", "a.b", "d", "e"}, "a package's __init__ and its imports load with its submodule"
