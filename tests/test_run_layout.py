"""The run folder has one home: grpo_playground.run_layout names its files and stages; nothing else types them.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_run_layout.py
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from grpo_playground import run_layout
from grpo_playground.contracts import layout, states
from grpo_playground.config import apply_overrides, load_recipe, save_recipe
from grpo_playground.config.run_settings import run_settings

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / "src" / "grpo_playground" / "run_layout.py"
NAMES = ROOT / "src" / "grpo_playground" / "contracts" / "layout.py"  # where the names are defined
FILE_NAMES = {value for name, value in vars(layout).items()
              if name.endswith(("_FILE", "_LOG", "_JOB", "_RESULT")) and isinstance(value, str)}
STAGE_LISTS = {tuple(states.TRAINED_STAGES), tuple(reversed(states.TRAINED_STAGES)), states.JOB_STAGES}


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


# Extensions only run-folder files have here: an f-string ending in one spells a run-folder name (f"{name}.jsonl");
# .json, .yaml, .txt and .log files are also results, recipes and server logs, so those are left to review.
OWN_EXTENSIONS = (".jsonl", ".request")


def _builds_a_name(node: ast.JoinedStr) -> bool:
    """An f-string that spells a run-folder file name of an OWN_EXTENSIONS kind."""
    last = node.values[-1]
    return isinstance(last, ast.Constant) and last.value.endswith(OWN_EXTENSIONS) and any(
        n.endswith(last.value) for n in FILE_NAMES)


def typed_names(path: Path, root: Path = ROOT) -> list[str]:
    """`file:line: 'name'` for each string that is a run-folder file name (or a path ending in one), and each literal
    list of stage names, outside docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs, found = _docstrings(tree), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if any(node.value == n or node.value.endswith("/" + n) for n in FILE_NAMES):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.JoinedStr) and _builds_a_name(node):
            found.append(f"{path.relative_to(root)}:{node.lineno}: f-string {ast.unparse(node)}")
        elif isinstance(node, (ast.Tuple, ast.List)) and node.elts and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            if tuple(e.value for e in node.elts) in STAGE_LISTS:
                found.append(f"{path.relative_to(root)}:{node.lineno}: stage list {ast.unparse(node)}")
    return found


def test_no_module_types_a_run_folder_name_or_the_stage_list():
    sources = [p for folder in ("src", "pipelines") for p in (ROOT / folder).rglob("*.py") if p not in (HOME, NAMES)]
    found = [hit for path in sources for hit in typed_names(path)]
    assert not found, ("run-folder names typed outside grpo_playground/contracts/layout.py; import them from there "
                       "(RECIPE_FILE, STATUS_FILE, TRAINED_STAGES, ...):\n" + "\n".join(found))


def test_the_grep_sees_a_typed_name_and_a_stage_list_but_not_a_docstring(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""Reads status.json."""\nPATH = "runs/x/status.json"\nSTAGES = ("sft", "grpo")\n'
                   'FEED = f"{name}.jsonl"\nFINE = f"{stamp}-{slug}.json"\n')
    hits = typed_names(bad, tmp_path)
    assert [h.split(": ", 1)[1] for h in hits] == ["'runs/x/status.json'", "stage list ('sft', 'grpo')",
                                                   "f-string f'{name}.jsonl'"]


def _run_with(tmp_path: Path, overrides: list[str]) -> Path:
    run = tmp_path / "20260101-000000-r-abcd"
    cfg = apply_overrides(load_recipe(ROOT / "recipes" / "tiny-cpu.yaml"), overrides)
    save_recipe(cfg, run / layout.RECIPE_FILE)
    (run / "grpo").mkdir()
    return run


def test_run_settings_come_from_the_runs_own_recipe(tmp_path):
    run = _run_with(tmp_path, ["rewards.tags={reasoning_start: '<think>', reasoning_end: '</think>', "
                               "solution_start: '<answer>', solution_end: '</answer>'}",
                               "data.prefill_reasoning=false", "rewards.weights={check_answer: 2.0}"])
    for where in (run, run / "grpo"):  # the run folder or one of its stage folders
        settings = run_settings(where)
        assert settings.tags.reasoning_start == "<think>" and settings.tags.solution_end == "</answer>"
        assert settings.prefill_reasoning is False
        assert settings.reward_weights == {"check_answer": 2.0}
        assert settings.base_model == "tiny" and settings.recipe == run / layout.RECIPE_FILE


@pytest.mark.parametrize("model", ["tiny", "no/such/folder"])
def test_a_model_outside_a_run_has_no_run_settings(model):
    assert run_settings(model) is None


def test_latest_stage_is_the_last_one_with_an_adapter(tmp_path):
    run = tmp_path / "r"
    assert run_layout.latest_stage(run) is None
    for stage in states.TRAINED_STAGES:
        run_layout.adapter_dir(run, stage).mkdir(parents=True)
        (run_layout.adapter_dir(run, stage) / layout.ADAPTER_CONFIG).write_text("{}")
        assert run_layout.latest_stage(run) == stage
