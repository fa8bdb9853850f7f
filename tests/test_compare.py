"""The "GRPO vs more SFT" comparison of the Evaluate tab: the job (grpo_playground.jobs.comparisons) and its panel.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_compare.py      (-m slow: the end-to-end run)
"""

from __future__ import annotations

import fcntl
import inspect
import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from grpo_playground.cli.args import CompareArgs
from grpo_playground.experiments.plan import MAX_DATA_FILE_BYTES, ComparisonPlan
from grpo_playground.jobs import comparisons as jobs
from grpo_playground.contracts.layout import GPU_LOCK
from grpo_playground.contracts.process import group_members
from grpo_playground.contracts.layout import (
    COMPARISON_JOB, COMPARISON_RESULT, COMPARISON_WORK, COMPARISONS_DIR, RECIPE_FILE, STATUS_FILE,
)
from grpo_playground.contracts.process import read_json
from grpo_playground.ui import compare_panel as panel
from shared_comparison import TINY_PLAN, tiny_run, wait_for

ROOT = Path(__file__).resolve().parents[1]
# GSM8K-shaped problems written for these tests (not GSM8K's text): 24 for A, 12 held out
GSM8K_TRAIN = ROOT / "tests" / "fixtures" / "gsm8k_small_train.jsonl"
GSM8K_TEST = ROOT / "tests" / "fixtures" / "gsm8k_small_test.jsonl"


@pytest.fixture
def runs(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("recipe, numbers, message", [
    ("recipe:tiny-cpu", (0, 16, 16, 8), "minutes = 0 is out of range"),  # T <= 0
    ("recipe:tiny-cpu", (16, 16, 16, 8), "minutes = 16 is out of range: use 0.05 to 15"),
    ("recipe:tiny-cpu", (1, 100_000, 16, 8), "n_worked = 100000 is out of range: use 1 to 500"),
    ("recipe:tiny-cpu", (1, 16, 10**9, 8), "n_answers = 1e\\+09 is out of range"),
    ("recipe:tiny-cpu", (1, 16, 16, 601), "n_eval = 601 is out of range: use 2 to 600"),
    ("recipe:tiny-cpu", (1, 2.5, 16, 8), "n_worked must be a whole number"),
    ("recipe:tiny-cpu", (float("inf"), 16, 16, 8), "minutes must be a number"),
    ("recipe:tiny-cpu", (1, None, 16, 8), "n_worked must be a number"),
    ("recipe:no-such", (1, 16, 16, 8), "unknown recipe 'recipe:no-such': pick one of the shipped recipes"),
    ("recipe:../../etc/passwd", (1, 16, 16, 8), "unknown recipe"),
    ("/etc/passwd", (1, 16, 16, 8), "unknown recipe"),
    ("run:../evals", (1, 16, 16, 8), "run id '../evals' is not valid"),
    ("run:20990101-000000-none-abcd", (1, 16, 16, 8), "no run"),
])
def test_bad_input_is_refused_with_what_to_change_and_starts_nothing(runs, recipe, numbers, message):
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        panel.start(recipe, "", *numbers, "1-2", 40, 5, 0.95)
    assert jobs.list_comparisons() == []


def test_bad_levels_and_sft_settings_are_refused(runs):
    with pytest.raises(ValueError, match="levels 'x': write levels from 1 to 5 such as 1-2"):
        panel.start("recipe:tiny-cpu", "", 1, 16, 16, 8, "x", 40, 5, 0.95)
    for levels in ("1-999999999", "6", "1,2,3,4,5,1,2,3,4,5,1"):  # a huge range, no such level, too long
        with pytest.raises(ValueError, match="write levels from 1 to 5"):
            panel.start("recipe:tiny-cpu", "", 1, 16, 16, 8, levels, 40, 5, 0.95)
    with pytest.raises(ValueError, match="max_rounds = 11 is out of range"):
        panel.start("recipe:tiny-cpu", "", 1, 16, 16, 8, "", 40, 11, 0.95)
    with pytest.raises(ValueError, match="format_target = 1.5 is out of range"):
        panel.start("recipe:tiny-cpu", "", 1, 16, 16, 8, "", 40, 5, 1.5)
    assert jobs.list_comparisons() == []


def test_the_panel_offers_shipped_recipes_and_each_runs_recipe(runs):
    run_id = tiny_run()
    choices = dict(panel.recipe_choices())
    assert choices["recipes/tiny-cpu.yaml"] == "recipe:tiny-cpu" and choices[f"run {run_id}"] == f"run:{run_id}"
    assert panel.resolve_recipe(f"run:{run_id}") == (runs / run_id / RECIPE_FILE, f"run {run_id}")


def test_the_committed_result_renders_as_chart_and_tables():
    result = json.loads((ROOT / "results" / "learning_seed_regime_cpu.json").read_text())
    chart = panel.chart_frame(result)
    assert list(chart["arm"]) == list(result["eval"]) and chart["accuracy"].tolist() == [13.3, 13.5, 13.0, 39.7]
    assert chart[panel.LEGEND].tolist() == ["sft_w: +0.2 ± 0.7", "grpo_a: the GRPO arm", "more_sft_w: +0.5 ± 1.1",
                                             "fresh_sft: -26.2 ± 2.0"]
    arms = panel.arms_frame(result).set_index("arm")
    assert arms.loc["sft_w+fresh_sft", "GRPO minus arm (points)"] == -26.2 and arms.loc["sft_w", "steps"] == 240
    levels = panel.level_frame(result).set_index("level")
    assert levels.loc["1", "prompts"] == 305 and levels.loc["2", "sft_w+fresh_sft"] == 25.8


@pytest.mark.slow  # a comparison's child and its training child
def test_a_comparison_waits_for_the_training_slot_and_stop_ends_its_whole_group(runs, fake_experiment):
    """It takes the lock a training run takes (so neither starves the other of the CPU/GPU), and Stop ends the
    chain and the training child it started (the fake experiment's: plumbing, tests/fake_experiment.py)."""
    lock = os.open(runs / GPU_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(lock, fcntl.LOCK_EX)  # a training run holds the slot
    state = panel.start("recipe:tiny-cpu", "", 1, 16, 16, 8, "", 3, 1, 0.0)
    comparison = state["id"]
    pgid = read_json(runs / COMPARISONS_DIR / comparison / COMPARISON_JOB)["pid"]
    time.sleep(3)
    assert jobs.comparison_state(comparison)["state"] == "waiting"
    with pytest.raises(RuntimeError, match=f"comparison {comparison} is still running"):
        panel.start("recipe:tiny-cpu", "", 1, 16, 16, 8, "", 3, 1, 0.0)
    os.close(lock)  # the training run ended
    assert wait_for(lambda: jobs.comparison_state(comparison)["steps"].get("sft_w"), 120), \
        jobs.comparison_state(comparison)["log"]
    assert jobs.comparison_state(comparison)["state"] == "running"
    assert jobs.stop_comparison(comparison).startswith(f"Stopped comparison {comparison}")
    assert wait_for(lambda: not group_members(pgid), 30), f"left running after Stop: {group_members(pgid)}"
    assert jobs.comparison_state(comparison)["state"] == "stopped"
    assert jobs.stop_comparison(comparison) == f"Comparison {comparison} is not running."


def test_a_comparison_runs_every_arm_in_the_background_and_the_panel_shows_it(runs, finished_comparison):
    """Start from a run's recipe (returns at once), follow it from disk (the session's shared comparison: started
    and followed that way in tests/shared_comparison.py), then the chart and the tables come from the experiment's
    own result JSON; a new page (the load event) lists and shows it."""
    assert finished_comparison.start_s < 10  # a job, not a request held open
    finished_comparison.copy_into(runs)
    run_id, comparison = finished_comparison.run_id, finished_comparison.id
    assert jobs.list_comparisons() == [comparison]
    state = jobs.comparison_state(comparison)
    assert state["state"] == "finished", state["log"]
    assert set(state["steps"]) == set(state["order"]) and {s["state"] for s in state["steps"].values()} == {"done"}

    status, log, chart, arms, levels, shown, picker, result_box, no_result, _, source_box = panel.view(None, None)
    assert not source_box.visible  # one held-out source: no per-source table
    assert result_box.visible and not no_result.visible  # the result, not the "no result yet" sentence
    result = json.loads((runs / COMPARISONS_DIR / comparison / f"{COMPARISON_RESULT}.json").read_text())
    assert picker.choices == [(comparison, comparison)] and picker.value == comparison
    assert "**Finished**" in status and f"on `run {run_id}`" in status and "- sft_w+grpo_a: done" in status
    assert list(chart["arm"]) == list(result["eval"]) and chart["accuracy"].between(0, 100).all()
    for arm, d in result["grpo_minus"].items():
        label = chart.set_index("arm").loc[arm, panel.LEGEND]
        assert label == f"{arm.split('+', 1)[-1]}: {100 * d['difference']:+.1f} ± {100 * d['se']:.1f}"
    assert arms["steps"].tolist() == [result["steps"][arm] for arm in result["eval"]]
    assert arms.set_index("arm")["GRPO minus arm (points)"].isna().tolist() == [False, True, False, False, False]
    assert list(levels.columns) == ["level", "prompts", *result["eval"]] and levels["prompts"].sum() == 8
    again = panel.view(comparison, shown)
    assert all(isinstance(x, dict) and x.get("__type__") == "update" for x in again[2:5] + again[-2:])  # not re-sent


def start_with_sources(answers: str = "", eval_data: str = "") -> dict:
    return panel.start("recipe:tiny-cpu", "", 1, 16, 16, 8, "", 40, 5, 0.95, answers, eval_data)


@pytest.fixture
def bad_files(tmp_path) -> dict[str, Path]:
    """A sparse file over the size cap, a file of other columns, one of broken lines, a .jsonl link to a non-.jsonl."""
    files = {name: tmp_path / f"{name}.jsonl" for name in ("huge", "columns", "broken", "link")}
    with files["huge"].open("wb") as f:
        f.truncate(MAX_DATA_FILE_BYTES + 1)
    files["columns"].write_text('{"problem": "1 + 1?", "expected_answer": "2"}\n' * 10)
    files["broken"].write_text('{"question": "1 + 1?", "answer": \n' * 10)
    files["link"].symlink_to(ROOT / "pyproject.toml")
    return files


@pytest.mark.parametrize("field, spec, message", [
    ("answers", "hub:openai/gsm8k", "answer-only problems \\(A\\) 'hub:openai/gsm8k': the panel takes gsm8k:/path"),
    ("eval_data", "dapo:x.jsonl", "held-out set 'dapo:x.jsonl': the panel takes gsm8k:/path/to/file.jsonl"),
    ("eval_data", "test.jsonl", "unknown data source 'test.jsonl': it must start with one of"),
    ("eval_data", "gsm8k:/no/such/test.jsonl", "held-out set: no file '/no/such/test.jsonl': check the path"),
    ("answers", f"gsm8k:{ROOT / 'tests' / 'fixtures' / 'custom_problems.csv'}", "is not a .jsonl file"),
    ("answers", "gsm8k:../../etc/passwd", "must end in one of .jsonl"),
    ("answers", "huge", "MB, over the panel's 50 MB: cut it"),
    ("eval_data", "columns", "the rows have no column\\(s\\) \\['question', 'answer'\\]"),  # the loader's words
    ("eval_data", "broken", "0 examples from 10 rows; skipped 10 \\(invalid JSON line: 10\\), 8 wanted"),
    ("answers", "link", "is not a .jsonl file"),  # the resolved path is checked: a link named .jsonl is not enough
])
def test_a_bad_data_source_is_refused_at_start_with_what_to_fix(runs, bad_files, field, spec, message):
    spec = f"gsm8k:{bad_files[spec]}" if spec in bad_files else spec
    with pytest.raises(ValueError, match=message):
        start_with_sources(**{field: spec})
    assert jobs.list_comparisons() == []


def test_a_visitor_gets_the_owner_refusal_before_any_data_file_is_read(runs, monkeypatch):
    monkeypatch.setenv("GRPO_PLAYGROUND_OWNER_TOKEN", "secret")
    with pytest.raises(PermissionError, match="needs the owner token"):
        start_with_sources(eval_data="gsm8k:/no/such/test.jsonl")


def test_the_form_the_api_and_the_command_line_derive_from_one_plan():
    """ComparisonPlan's fields are the panel's inputs (FORM, in order) and /compare_start's parameters, with the plan's
    defaults; the command the job runs is the plan's CompareArgs, which the CLI parses back to the same values."""
    parameters = inspect.signature(panel.api_start).parameters
    assert [name for name in parameters if name not in ("recipe", "token")] == panel.FORM
    assert {name: parameters[name].default for name in panel.FORM} == asdict(ComparisonPlan())
    args = ComparisonPlan(minutes=2, n_worked=50).args(Path("r.yaml"), Path("w"), Path("o"))
    assert CompareArgs.parse_args(args.to_argv()) == args and (args.minutes, args.n_worked) == (2, 50)
    assert jobs.experiment_command(Path("/c"), ComparisonPlan())[1:3] == ["-m", "grpo_playground.experiments.seed_regime"]
    with pytest.raises(ValueError, match="unknown comparison settings \\['minute'\\]"):
        ComparisonPlan.from_form({"minute": 3})


def test_gsm8k_sources_reach_the_command_resolved_and_the_generated_held_out_set_is_scored_too(monkeypatch):
    monkeypatch.chdir(ROOT / "tests")
    relative = "gsm8k:fixtures/../fixtures/gsm8k_small_train.jsonl"  # typed relative to the app's folder
    plan = ComparisonPlan(n_answers=16, n_eval=8, levels="1-2", answers=relative, eval_data=f"gsm8k:{GSM8K_TEST}")
    assert (plan.answers, plan.eval_data) == (f"gsm8k:{GSM8K_TRAIN}", f"gsm8k:{GSM8K_TEST}")
    assert ComparisonPlan(**asdict(plan)) == plan  # a resume checks the stored plan and gets the same one
    command = jobs.experiment_command(Path("/c"), plan)
    flags = dict(zip(command[3::2], command[4::2]))
    assert flags["--answers"] == f"gsm8k:{GSM8K_TRAIN}" and flags["--eval-data"] == f"gsm8k:{GSM8K_TEST}"
    assert flags["--eval-data-2"] == "generator:test?levels=1-2" and flags["--n-eval-2"] == "8"
    assert panel.sources_text(asdict(plan)) == (", A from gsm8k:gsm8k_small_train.jsonl, held-out "
                                                "gsm8k:gsm8k_small_test.jsonl + generated")
    generated = jobs.experiment_command(Path("/c"), ComparisonPlan(n_answers=16, answers=f"gsm8k:{GSM8K_TRAIN}"))
    assert "--eval-data-2" not in generated
    assert generated[generated.index("--eval-data") + 1] == "generator:test?levels=1-2"


@pytest.mark.slow  # a comparison's child
def test_a_gsm8k_sourced_comparison_runs_and_the_panel_shows_the_accuracy_per_source(runs, fake_experiment, app_url):
    """A from one GSM8K-format file, the held-out set from another, started and followed through the app's API as a
    Space's client does (/compare_start, /compare_status): every arm is scored on the file's prompts and on generated
    ones, and the per-source table shows both. The fake experiment (the real driver and eval CLI, no model:
    tests/fake_experiment.py) runs it: what is proven is where each source goes (the real experiment on the same
    plan: the session's finished_comparison)."""
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    minutes, n_worked, n_answers, n_eval, levels, round_steps, max_rounds, format_target = TINY_PLAN
    started = client.predict(f"run:{tiny_run()}", minutes, n_worked, n_answers, n_eval, levels, round_steps,
                             max_rounds, format_target, "", f"gsm8k:{GSM8K_TRAIN}", f"gsm8k:{GSM8K_TEST}",
                             api_name="/compare_start")
    comparison = started["id"]
    assert jobs.list_comparisons() == [comparison]
    status = lambda: client.predict(comparison, api_name="/compare_status")  # noqa: E731
    assert wait_for(lambda: status()["state"] not in ("waiting", "running"), 600)
    assert status()["state"] == "finished", jobs.comparison_state(comparison)["log"]
    state = jobs.comparison_state(comparison)
    result, work = state["result"], runs / COMPARISONS_DIR / comparison / COMPARISON_WORK
    # the sources were used, not the generator's: A's prompts are the train file's, the primary column the test file's
    train_questions = {json.loads(line)["question"] for line in GSM8K_TRAIN.open()}
    assert {json.loads(line)["prompt"] for line in (work / "data" / "answers.jsonl").open()} <= train_questions
    assert {e["data"] for e in result["eval"].values()} == {f"gsm8k:{GSM8K_TEST}"}
    assert [{e["data"] for e in c["eval"].values()} for c in result["second_eval"]] == [{"generator:test"}]

    status, *_, per_source, source_box = panel.view(None, None)
    assert source_box.visible
    assert "A from gsm8k:gsm8k_small_train.jsonl, held-out gsm8k:gsm8k_small_test.jsonl + generated" in status
    table = per_source.set_index("arm")
    for label, column in (("gsm8k:gsm8k_small_test.jsonl", result), ("generated", result["second_eval"][0])):
        assert table[f"{label} accuracy %"].tolist() == [round(100 * e["accuracy"], 1) for e in column["eval"].values()]
        assert table[f"{label} GRPO minus arm"].isna().tolist() == [False, True, False, False, False]


ARM_FOLDERS = {"sft_w+grpo_a": "grpo_a", "sft_w+more_sft_w": "more_sft_w", "sft_w+fresh_sft": "fresh_sft"}


def finished_files(work: Path) -> dict[Path, bytes]:
    """What the steps finished so far left: every finished run folder's status, its log, the data and evaluations."""
    done = [status for status in work.glob(f"*/{STATUS_FILE}") if read_json(status).get("state") == "finished"]
    files = [*done, *(work / f"{s.parent.name}.log" for s in done), *work.glob("data/*"), *work.glob("eval_*.json")]
    return {path: path.read_bytes() for path in files if path.is_file()}


@pytest.mark.slow  # a comparison's child and its training children
def test_a_stopped_comparison_resumes_without_redoing_the_steps_it_finished(runs, fake_experiment):
    """Stop once sft-W is done, then Resume comparison: it runs again in its own folder, every step finished before
    is left as it was (not trained again), and the interrupted arm starts over. The fake experiment (the real driver,
    no model: tests/fake_experiment.py) runs it."""
    panel.run_start(f"run:{tiny_run()}", "", *TINY_PLAN, "", "")  # the page sends every box, the sources empty
    comparison = jobs.list_comparisons()[0]
    work = runs / COMPARISONS_DIR / comparison / COMPARISON_WORK
    state = lambda: jobs.comparison_state(comparison)
    assert wait_for(lambda: state()["steps"].get("sft_w", {}).get("state") == "done", 400), state()["log"]
    jobs.stop_comparison(comparison)
    assert wait_for(lambda: state()["state"] == "stopped", 60), state()["log"]
    assert "press **Resume comparison**" in panel.state_text(state())
    kept = finished_files(work)
    interrupted = next(arm for arm in ARM_FOLDERS if state()["steps"].get(arm, {}).get("state") != "done")
    assert any(path.parent.name == "sft_w_round0" for path in kept), sorted(kept)

    resumed_at = time.time()
    panel.run_resume(comparison, "")
    assert state()["state"] in ("waiting", "running") and state()["resumes"] == 1
    with pytest.raises(RuntimeError, match=f"comparison {comparison} is still running: nothing to resume"):
        jobs.resume_comparison(comparison)
    arm_status = work / ARM_FOLDERS[interrupted] / STATUS_FILE
    assert wait_for(lambda: read_json(arm_status).get("started", 0) > resumed_at, 300), state()["log"]
    assert state()["steps"]["sft_w"]["state"] == "done"
    assert {path: path.read_bytes() for path in kept} == kept, "a step finished before the stop ran again"
    jobs.stop_comparison(comparison)
    assert wait_for(lambda: state()["state"] == "stopped", 60)


def test_only_a_stopped_or_cut_comparison_resumes(runs):
    with pytest.raises(FileNotFoundError, match="no comparison '20991231-235959-compare-0001'"):
        jobs.resume_comparison("20991231-235959-compare-0001")
    folder = runs / COMPARISONS_DIR / "20991231-235959-compare-0002"
    folder.mkdir(parents=True)
    (folder / COMPARISON_JOB).write_text(json.dumps({"state": "finished", "meta": {"plan": {}}}))
    (folder / f"{COMPARISON_RESULT}.json").write_text(json.dumps({"eval": {}}))
    with pytest.raises(RuntimeError, match="has finished: start a new one"):
        jobs.resume_comparison(folder.name)


def test_a_tick_never_sends_a_valid_pick_back_only_the_longer_list(runs):
    """Start creates the new comparison, then answers with it picked: a tick computed in between, with the old pick,
    sent value=old and could land after the answer, showing the old comparison instead of the one just started."""
    from grpo_playground.run_layout import comparisons_dir

    def write(name: str) -> str:
        (comparisons_dir() / name).mkdir()
        (comparisons_dir() / name / COMPARISON_JOB).write_text(json.dumps(
            {"kind": "compare", "state": "stopped", "steps": [], "meta": {"recipe_name": "recipes/tiny-cpu.yaml"}}))
        return name

    old = write("20991231-235958-compare-0501")
    *_, shown, picker, _, _, _, _ = panel.view(None, None)  # page load: the newest is picked
    assert picker.value == old
    new = write("20991231-235959-compare-0502")  # started meanwhile: the click's answer picks it
    *_, shown, picker, _, _, _, _ = panel.view(old, shown)
    assert picker == {"__type__": "update", "choices": [new, old]}, picker
    *_, picker, _, _, _, _ = panel.view(old, shown)
    assert picker == {"__type__": "update"}  # nothing new: nothing sent
