"""The Training tab and its API, driven through the real app with gradio_client, running the real
`python -m pipelines.train` on the embedded tiny model (few steps: seconds to a minute each on 2 cores).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_training_tab.py
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import pytest
from gradio_client import Client

from grpo_playground.config import SECTIONS, ConfigError, RunConfig, apply_overrides, dump_recipe, load_recipe
from grpo_playground.contracts.process import group_members, kill_group
from grpo_playground.contracts.states import ACTIVE_STATES
from grpo_playground.jobs.runs import list_runs
from grpo_playground.rewards import REWARDS
from grpo_playground.ui import run_views
from grpo_playground.ui.config_form import config_from_values, form_fields, values_from_config

ROOT = Path(__file__).resolve().parents[1]
TINY_READY = (ROOT / "assets" / "tiny" / "config.json").exists()
needs_tiny = pytest.mark.skipif(not TINY_READY, reason="assets/tiny is missing: python -m pipelines.build_tiny")
TERMINAL = ("stopped", "finished", "failed")


def tiny_recipe(*overrides: str) -> str:
    """The shipped tiny-cpu recipe cut down to a few steps, as the YAML text an API client sends."""
    cfg = apply_overrides(load_recipe(ROOT / "recipes" / "tiny-cpu.yaml"),
                          ["tracking.swanlab=disabled", "data.n_sft=256", "data.n_grpo=64", *overrides])
    return dump_recipe(cfg)


def wait_status(client: Client, run_id: str, predicate, timeout: float = 240, what: str = ""):
    deadline = time.time() + timeout
    summary = None
    while time.time() < deadline:
        summary = client.predict(run_id, api_name="/status")
        if predicate(summary):
            return summary
        time.sleep(0.5)
    log = Path(os.environ["GRPO_PLAYGROUND_RUNS_DIR"], run_id, "log.txt")
    raise AssertionError(f"timed out waiting for {what}: {json.dumps(summary)[:1500]}\n"
                         f"log tail:\n{log.read_text()[-3000:] if log.exists() else ''}")


def wait_no_process(pgid: int, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while group_members(pgid) and time.time() < deadline:
        time.sleep(0.2)
    assert not group_members(pgid), f"processes left in the job's group: {group_members(pgid)}"


@pytest.fixture(scope="module")
def client(app_url):
    yield Client(app_url, verbose=False)
    # Jobs outlive the app by design: a test that failed half-way must not leave one training on shared cores.
    for info in list_runs():
        if info.state in ACTIVE_STATES and info.job.get("pid"):
            kill_group(info.job["pid"])


# --- the form is the RunConfig ------------------------------------------------------------------------

def test_form_has_every_config_field_and_nothing_else():
    specs = form_fields()
    covered = {(s.section, s.name) for s in specs}
    expected = {(None, "name")} | {(section, f.name) for section, cls in SECTIONS.items() for f in fields(cls)}
    assert covered == expected
    kinds = {(s.section, s.name): s.kind for s in specs}
    # the kinds follow the annotations: a number box for numbers, a checkbox for bools, a table for weights
    assert kinds[("grpo", "learning_rate")] == "float" and kinds[("grpo", "max_steps")] == "int"
    assert kinds[("sft", "enabled")] == "bool" and kinds[("grpo", "loss_type")] == "choice"
    assert kinds[("rewards", "weights")] == "weights" and kinds[("rewards", "tags")] == "tag"
    assert all(s.help for s in specs), "every field shows its help text"


@pytest.mark.parametrize("recipe", sorted(p.name for p in (ROOT / "recipes").glob("*.yaml")))
def test_every_shipped_recipe_round_trips_through_the_form(recipe):
    cfg = load_recipe(ROOT / "recipes" / recipe)
    specs = form_fields()
    values = values_from_config(specs, cfg)
    weights_rows = values[[s.kind for s in specs].index("weights")]
    assert [row[0] for row in weights_rows] == list(REWARDS)  # every registered reward can be switched on
    assert config_from_values(specs, values) == cfg


def test_an_empty_optional_number_means_none_not_zero():
    # gr.Number sends 0 for an empty box; 0 is invalid for e.g. a time budget, so such fields are text boxes
    specs = form_fields()
    index = [(s.section, s.name) for s in specs].index(("sft", "max_minutes"))
    values = values_from_config(specs, RunConfig())
    assert values[index] == ""
    assert config_from_values(specs, values).sft.max_minutes is None
    values[index] = " 2.5 "
    assert config_from_values(specs, values).sft.max_minutes == 2.5


def test_a_bad_form_value_names_the_field():
    specs = form_fields()
    values = values_from_config(specs, RunConfig())
    values[[(s.section, s.name) for s in specs].index(("grpo", "learning_rate"))] = 0.5
    with pytest.raises(ConfigError, match=r"grpo\.learning_rate"):
        config_from_values(specs, values)


# --- live views over recorded run files -------------------------------------------------------------------

def test_charts_and_progress_from_a_metrics_stream():
    metrics = [{"stage": "sft", "step": 10, "time": 0.0, "loss": 1.5, "learning_rate": 2e-4},
               {"stage": "grpo", "step": 5, "max_steps": 20, "time": 100.0, "reward": -2.0, "reward_std": 0.0,
                "rewards/check_answer/mean": -2.0, "rewards/check_numbers/mean": -2.5, "loss": 0.0,
                "completions/clipped_ratio": 1.0, "frac_reward_zero_std": 1.0},
               {"stage": "grpo", "step": 10, "max_steps": 20, "time": 150.0, "reward": -1.0, "reward_std": 0.5},
               {"stage": "grpo", "step": 20, "train_runtime": 9.0}]  # the Trainer's summary row is no step
    frames = dict(zip([c[0] for c in run_views.CHARTS], run_views.chart_frames(metrics)))
    per_reward = frames["Each reward function's mean"]
    assert set(per_reward["series"]) == {"check_answer", "check_numbers"}
    assert frames["Reward (mean) and reward std"]["step"].tolist() == [5, 5, 10, 10]
    assert frames["Loss"]["step"].tolist() == [5]  # the stage logged last only: GRPO's steps on their own axis
    sft_frames = dict(zip([c[0] for c in run_views.CHARTS], run_views.chart_frames(metrics, "sft")))
    assert sft_frames["Loss"]["step"].tolist() == [10] and sft_frames["Reward (mean) and reward std"]["step"].any()
    p = run_views.progress({"stage": "grpo", "step": 10, "max_steps": 20}, metrics)
    assert p["fraction"] == 0.5 and p["eta_s"] == pytest.approx(100.0)  # 10 s per step, 10 steps to go


def test_a_tick_sends_only_what_changed(tmp_path, monkeypatch):
    """The 2 s poll re-draws the charts only when the job appended metrics; a partly written line waits."""
    from grpo_playground.ui.training_run_view import poll

    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    run = tmp_path / "20990101-000000-t-0001"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"state": "finished", "stage": "grpo", "step": 2, "max_steps": 4}))
    (run / "metrics.jsonl").write_text(json.dumps({"stage": "grpo", "step": 1, "reward": -2.0}) + "\n")
    first = poll(None, None, None, "reward")
    view, charts = first.view, first.charts
    assert view["run_id"] == run.name and chart_points(charts[0]) == [-2.0] and charts[0]["visible"]
    # no kl logged: the chart is hidden (no empty, untitled box) and gets None, not an empty frame (gradio then
    # drew no later data)
    assert charts[2] == {"__type__": "update", "value": None, "visible": False}
    again = poll(run.name, view, None, "reward")
    assert all(c == {"__type__": "update"} for c in again.charts)  # gr.skip(): not re-sent
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"stage": "grpo", "step": 2, "reward": -1.0}) + "\n" + '{"stage": "grpo", "st')
    grown = poll(run.name, view, None, "reward")
    assert chart_points(grown.charts[0]) == [-2.0, -1.0]


def test_a_stale_run_message_is_cleared_by_one_tick_and_a_later_message_stays(tmp_path, monkeypatch):
    """A message marked for a state the run has left is cleared with its mark; ticks after that (and one sent
    before a button's answer came, without the mark) leave the next message alone."""
    from grpo_playground.ui.training_run_view import poll

    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    run = tmp_path / "20990101-000000-t-0002"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"state": "finished", "stage": "grpo", "step": 2, "max_steps": 4}))
    stale = poll(run.name, None, None, "reward", [run.name, "running"])
    assert stale.message == "" and stale.message_for is None
    for mark in (None, [run.name, "finished"]):  # cleared already; a message written for the present state
        tick = poll(run.name, stale.view, None, "reward", mark)
        assert tick.message == {"__type__": "update"} and tick.message_for == {"__type__": "update"}, mark


def chart_points(update: dict) -> list[float]:
    """The y values of the first series a chart update draws (its Vega-Lite spec's data)."""
    spec = json.loads(update["value"].plot)
    return [row["value"] for row in spec["data"]["values"] if row["series"] == spec["data"]["values"][0]["series"]]


def test_the_step_time_chart_stacks_each_steps_phases_from_metrics_jsonl(tmp_path, monkeypatch):
    """timing/* keys of metrics.jsonl become one bar per step, stacked by phase (they add up to the step), for
    the stage logged last: SFT's step 1 and GRPO's step 1 are different steps."""
    from grpo_playground.step_timing import STEP_KEY, phase_key
    from grpo_playground.ui.training_run_view import poll

    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    run = tmp_path / "20990101-000000-t-0001"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"state": "finished", "stage": "grpo", "step": 2, "max_steps": 2}))
    rows = [{"stage": "sft", "step": 1, phase_key("forward_backward"): 9.0, STEP_KEY: 9.0}]
    rows += [{"stage": "grpo", "step": step, phase_key("rollout"): 2.0 * step, phase_key("rewards"): 0.5,
              phase_key("other"): 0.25, STEP_KEY: 2.0 * step + 0.75} for step in (1, 2)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    index = [c.title for c in run_views.CHARTS].index("Where the step time went (s)")
    update = poll(None, None, None, "reward").charts[index]
    spec = json.loads(update["value"].plot)
    assert update["visible"] and spec["mark"]["type"] == "bar" and spec["encoding"]["y"]["stack"] == "zero"
    bars = {(r["step"], r["series"]): r["value"] for r in spec["data"]["values"]}
    assert bars == {(1, "rollout"): 2.0, (1, "rewards"): 0.5, (1, "other"): 0.25,
                    (2, "rollout"): 4.0, (2, "rewards"): 0.5, (2, "other"): 0.25}  # GRPO's, not SFT's 9 s
    assert sum(v for (step, _), v in bars.items() if step == 2) == rows[2][STEP_KEY]  # a bar is the whole step


def _fake_run(root: Path, run_id: str, state: str, **status) -> Path:
    run = root / run_id
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"state": state, **status}))
    return run


def test_a_tick_never_moves_the_picker_off_a_run_just_picked(tmp_path, monkeypatch):
    """Start sets the picker to the new run while a tick computed from the old pick is in flight: the tick must
    only add the new run to the choices, never send the old value back (it did: the tab then showed the old run)."""
    from grpo_playground.ui.training_run_view import poll

    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    old = _fake_run(tmp_path, "20990101-000000-old-0001", "finished")
    first = poll(None, None, None, "reward")
    assert first.run_pick["value"] == old.name  # an empty picker gets the run the tab shows
    new = _fake_run(tmp_path, "20990101-000001-new-0002", "running", pid=os.getpid())
    tick = poll(old.name, first.view, None, "reward")  # in flight with the old pick
    assert new.name in tick.run_pick["choices"]
    assert "value" not in tick.run_pick, "the tick sent the old pick back over the new one"


def test_a_new_run_replaces_the_previous_runs_preflight_and_stale_messages_clear(tmp_path, monkeypatch):
    from grpo_playground.ui.training_run_view import poll

    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    old = _fake_run(tmp_path, "20990101-000000-old-0001", "finished")
    (old / "preflight.json").write_text(json.dumps({"level": "error", "why": "old run's verdict"}))
    new = _fake_run(tmp_path, "20990101-000001-new-0002", "stopped")
    shown = poll(old.name, None, None, "reward")
    assert "old run's verdict" in shown.preflight_verdict
    switched = poll(new.name, shown.view, None, "reward")
    assert "No pre-flight report" in switched.preflight_verdict  # not the old run's verdict left on screen
    # "Resuming X (queued)" once X has moved on: the message goes (the progress line has the current state)
    assert poll(new.name, switched.view, None, "reward", [new.name, "queued"]).message == ""
    assert poll(new.name, switched.view, None, "reward", [new.name, "stopped"]).message == {"__type__": "update"}


@pytest.mark.parametrize("state,stoppable", [("queued", True), ("running", True), ("stopping", False),
                                              ("stopped", False), ("finished", False)])
def test_stop_is_offered_only_while_there_is_something_to_stop(tmp_path, state, stoppable):
    # issue 39 item 9: after Stop was pressed the run is "stopping" (saving at its next step); Stop stayed red and
    # clickable until the run exited
    from grpo_playground.jobs.runs import RunInfo
    from grpo_playground.ui.training_run_view import control_updates

    stop, _ = control_updates(RunInfo("r", tmp_path, {"state": state}, {}))
    assert stop["interactive"] is stoppable


def test_sample_cells_show_the_end_of_a_completion_where_the_answer_is():
    # issue 39 item 7: the table cut completions at 240 characters from the start, before the answer
    long = "<start_working_out>" + "step by step, " * 80 + "so 42.<end_working_out><SOLUTION>42</SOLUTION>"
    cell = run_views.sample_table({"completions": [long, "short"], "total": [1.0, 0.0]})["completion"].tolist()
    assert cell[1] == "short"
    assert len(cell[0]) <= run_views.SAMPLE_CELL_CHARS  # what the table shows whole
    assert cell[0].startswith("<start_working_out>step by step") and cell[0].endswith("<SOLUTION>42</SOLUTION>")
    assert "[...]" in cell[0]


def test_a_flat_reward_says_how_long_it_has_lasted():
    # issue 39 item 9: the doctor said "flat for 3 logged steps" when all 12 were (written at the first flat window)
    from grpo_playground.doctor import diagnose

    metrics = [{"stage": "grpo", "step": s, "reward": -8.5, "frac_reward_zero_std": 1.0} for s in range(1, 13)]
    written = [f.to_dict() for f in diagnose(metrics[:3])]  # what the job wrote at step 3
    shown = {f["rule"]: f["message"] for f in run_views.doctor_findings(written, metrics)}
    assert "for 3 logged steps" in shown["flat_reward"]
    assert "still flat at the latest step: 12 logged steps in all (steps 1-12)" in shown["flat_reward"]
    # once the reward moves, the finding stays as written (its window was flat; the latest steps are not)
    moved = metrics + [{"stage": "grpo", "step": 13, "reward": 1.0}]
    assert "still flat" not in {f["rule"]: f["message"] for f in run_views.doctor_findings(written, moved)}[
        "flat_reward"]


def test_readable_numbers_and_the_doctors_knob_in_view():
    sample = {"completions": ["a", "b"], "total": [1.0, -1.0], "advantages": [0.7071067811865476, -0.7071067811865476],
              "rewards": {"check_answer": [0.123456, -2.0]}}
    table = run_views.sample_table(sample)
    assert table["advantage"].tolist() == [0.707, -0.707] and table["check_answer"].tolist() == [0.123, -2.0]
    findings = [{"step": 3, "rule": "length_pinned", "severity": "warning", "message": "hit <the> limit",
                 "knob": "raise grpo.max_completion_length", "stage": "grpo"},
                {"step": 5, "rule": "nan_loss", "severity": "error", "message": "loss became NaN", "knob": "lower lr",
                 "stage": "grpo"}]
    html = run_views.findings_html(findings)
    assert html.index("doctor-error") < html.index("doctor-warning")  # the most urgent first
    assert "hit &lt;the&gt; limit" in html and "Try: raise grpo.max_completion_length" in html
    assert run_views.findings_caption(findings).startswith("**Doctor:** 2 findings (1 error, 1 warning)")
    assert "no problem seen" in run_views.findings_caption([])


def test_overall_eta_adds_the_later_stages_budgets(tmp_path):
    from grpo_playground.jobs.runs import RunInfo

    (tmp_path / "recipe.yaml").write_text((ROOT / "recipes" / "quick.yaml").read_text())
    quick = load_recipe(ROOT / "recipes" / "quick.yaml")
    assert run_views.later_stage_budgets(RunInfo("q", tmp_path, {}, {"meta": {"stage": "all"}})) == \
        [("sft", quick.sft.max_minutes * 60), ("grpo", quick.grpo.max_minutes * 60)]
    assert [s for s, _ in run_views.later_stage_budgets(RunInfo("q", tmp_path, {}, {"meta": {"stage": "sft"}}))] == ["sft"]

    info = RunInfo("r", Path("r"), {"state": "running", "stage": "sft", "step": 10, "max_steps": 20, "eta_s": 60.0}, {})
    plan = [("sft", 180.0), ("grpo", 120.0)]
    text = run_views.progress_markdown(info, [], plan)
    assert "ETA 1m00s (this stage)" in text and "at most 3m00s in all (then grpo up to 2m00s)" in text
    assert "in all" not in run_views.progress_markdown(info, [], [("sft", 180.0)])
    assert "no time budget" in run_views.progress_markdown(info, [], [("sft", None), ("grpo", None)])


def test_the_cli_box_carries_the_form_edits_as_set_arguments():
    from grpo_playground.ui.training_form import cli_for_recipe, overrides_between

    base = load_recipe(ROOT / "recipes" / "quick.yaml")
    edited = apply_overrides(base, ["grpo.max_steps=5", "data.grpo_source=generator:train?levels=2"])
    edits = overrides_between(base, edited)
    assert sorted(edits) == ["data.grpo_source=generator:train?levels=2", "grpo.max_steps=5"]
    command = cli_for_recipe("recipes/quick.yaml", "all", edits)
    assert "--set grpo.max_steps=5" in command and "--set 'data.grpo_source=generator:train?levels=2'" in command
    assert overrides_between(base, base) == []
    # what the CLI would run is what the form holds
    assert apply_overrides(base, edits) == edited


def test_a_malformed_recipe_names_line_and_column_without_a_temp_path(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ngrpo:\n  max_steps: 5\n   beta: 0.1\n")
    with pytest.raises(ConfigError) as error:
        load_recipe(bad)
    assert "line 4, column 8" in str(error.value) and str(tmp_path) not in str(error.value)


# --- jobs through the app's API ----------------------------------------------------------------------------

def test_sandbox_gets_the_runs_own_rewards_tags_and_scaling(tmp_path, monkeypatch):
    # the sandbox must score a sample group as GRPO did: the run's de-gamed reward, not the sandbox's default set
    from grpo_playground.ui.training_samples import sandbox_settings

    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    cfg = apply_overrides(load_recipe(ROOT / "recipes" / "tiny-cpu.yaml"),
                          ["grpo.scale_rewards=none", "rewards.gate_on_format=true", "grpo.max_completion_length=200",
                           "rewards.cosine_max_len=500"])
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "recipe.yaml").write_text(dump_recipe(cfg))
    settings = sandbox_settings("r1")
    assert settings["weights"] == cfg.rewards.weights and "check_answer_strict_nomatch" in settings["weights"]
    assert settings["tags"]["solution_start"] == "<SOLUTION>" and settings["scale"] == "none"
    # the gate and the length limit change the scores of gated and soft_overlong rewards: the run's, not defaults
    assert settings["gate_on_format"] is True and settings["max_completion_length"] == 200
    assert settings["cosine_max_len"] == 500 and settings["repetition_n_grams"] == 3
    (tmp_path / "r2").mkdir()
    (tmp_path / "r2" / "recipe.yaml").write_text("grpo: [not, a, mapping\n")
    assert sandbox_settings("r2") is None  # a broken recipe keeps the sandbox's own settings


def test_bad_recipe_is_refused_with_the_field_named(client):
    with pytest.raises(Exception, match=r"grpo\.num_generations"):
        client.predict(tiny_recipe().replace("num_generations: 8", "num_generations: 1"), "all", "",
                       api_name="/start")


def test_owner_token_guards_start_stop_resume_export_but_not_watching(client, monkeypatch):
    monkeypatch.setenv("GRPO_PLAYGROUND_OWNER_TOKEN", "owner-s3cret")
    for args, api in (((tiny_recipe(), "all", ""), "/start"), ((tiny_recipe(), "all", "guess"), "/start"),
                      (("any-run", "nope"), "/stop"), (("any-run", ""), "/resume"),
                      (("any-run", ["q4_k_m"], ""), "/export")):
        with pytest.raises(Exception, match="owner token"):
            client.predict(*args, api_name=api)
    assert isinstance(client.predict(api_name="/runs"), list)  # visitors can watch


def test_crash_marks_failed_and_the_app_keeps_serving(client):
    # a data file that is not there: found by the job (a model that cannot load is refused before: test below)
    started = client.predict(tiny_recipe("data.sft_source=gsm8k:/nonexistent/data.jsonl"), "sft", "",
                             api_name="/start")
    done = wait_status(client, started["run_id"], lambda s: s["state"] in TERMINAL, what="the crash")
    assert done["state"] == "failed"
    assert "/nonexistent/data.jsonl" in done["status"]["reason"]
    wait_no_process(started["pgid"])
    assert any(r["run_id"] == started["run_id"] for r in client.predict(api_name="/runs"))


def test_a_model_that_cannot_load_is_refused_at_start_with_the_reason(client):
    runs = {r["run_id"] for r in client.predict(api_name="/runs")}
    with pytest.raises(Exception, match="not an existing path"):
        client.predict(tiny_recipe("model.name_or_path=/nonexistent/model"), "sft", "", api_name="/start")
    assert {r["run_id"] for r in client.predict(api_name="/runs")} == runs  # no run made, no job started


@pytest.mark.slow  # a second app in a child process
def test_start_grow_stop_resume_queue_restart(client, app_url, fake_trainer):
    """Plumbing: the queue, stop, resume and a restarted app re-attaching, with the fake trainer child (the real
    one's stop and resume: tests/test_train_cli.py, tests/test_resume.py)."""
    # far more steps than the test waits for: the job must still be running when the second app looks
    recipe = tiny_recipe("sft.max_steps=100000", "sft.logging_steps=2", "sft.save_steps=100000",
                         "sft.per_device_train_batch_size=8")
    first = client.predict(recipe, "sft", "", api_name="/start")
    run_id = first["run_id"]
    # metrics grow while it runs
    grown = wait_status(client, run_id, lambda s: s["metrics"] >= 2, what="two metric rows")
    assert grown["state"] == "running"
    later = wait_status(client, run_id, lambda s: s["metrics"] > grown["metrics"], what="more metrics")
    assert later["last_metrics"]["step"] > grown["last_metrics"]["step"]

    # the queue: a second job waits, visibly, while the first one runs; it can leave the queue
    second = client.predict(recipe, "sft", "", api_name="/start")
    time.sleep(2)
    waiting = client.predict(second["run_id"], api_name="/status")
    assert waiting["state"] == "queued" and waiting["queue_position"] == 1
    client.predict(second["run_id"], "", api_name="/stop")
    assert wait_status(client, second["run_id"], lambda s: s["state"] in TERMINAL)["status"]["reason"] == \
        "stopped while queued"

    # stop: the job saves at the step boundary and exits; nothing of its process group is left
    client.predict(run_id, "", api_name="/stop")
    stopped = wait_status(client, run_id, lambda s: s["state"] in TERMINAL, timeout=120, what="stop")
    assert stopped["state"] == "stopped", stopped
    wait_no_process(first["pgid"])
    stopped_step = stopped["status"]["step"]
    assert stopped_step > 0

    # resume: the step count continues from the checkpoint saved at the stop
    resumed = client.predict(run_id, "", api_name="/resume")
    assert resumed["pgid"] != first["pgid"]
    wait_status(client, run_id, lambda s: s["state"] == "running" and s["status"].get("step", 0) > stopped_step,
                what="steps after the resume")

    # restart the app: a second launch on another port re-attaches to the running job from disk
    with socket.socket() as s:  # (conftest.free_port: two conftest modules exist, so no `import conftest`)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1"}
    app2 = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        client2 = _connect(f"http://127.0.0.1:{port}/")
        seen = client2.predict(run_id, api_name="/status")
        assert seen["state"] == "running" and seen["pgid"] == resumed["pgid"]
        wait_status(client2, run_id, lambda s: s["metrics"] > seen["metrics"], what="metrics seen by the new app")
        client2.predict(run_id, "", api_name="/stop")
        assert wait_status(client2, run_id, lambda s: s["state"] in TERMINAL, timeout=120)["state"] == "stopped"
        wait_no_process(resumed["pgid"])
    finally:
        app2.terminate()
        app2.wait(timeout=30)


def _connect(url: str, timeout: float = 120) -> Client:
    deadline = time.time() + timeout
    while True:
        try:
            return Client(url, verbose=False)
        except Exception:
            if time.time() > deadline:
                raise
            time.sleep(1)


# GRPO on the base tiny model, its latest group, pre-flight and doctor's findings as the tab's tick reads them:
# tests/browser/test_e2e_collapse.py, on the run that test trains and watches in the browser.


def test_progress_of_a_finished_all_stages_run_and_of_the_hand_over():
    metrics = [{"stage": "sft", "step": s, "max_steps": 240, "time": float(s)} for s in (10, 240)]
    metrics += [{"stage": "grpo", "step": s, "max_steps": 12, "time": 300.0 + s} for s in (1, 12)]
    done = run_views.progress({"state": "finished", "stage": "all", "step": 12, "max_steps": 12}, metrics)
    assert (done["stage"], done["step"], done["max_steps"], done["fraction"]) == ("grpo", 12, 12, 1.0)
    # the job has just begun GRPO: status.json still holds SFT's max_steps and its ETA of 0
    handover = run_views.progress({"state": "running", "stage": "grpo", "step": 0, "max_steps": 240, "eta_s": 0},
                                  metrics[:2])
    assert handover["starting"] and handover["max_steps"] is None and handover["eta_s"] is None


def test_every_button_that_writes_the_run_message_marks_whose_state_it_was_written_for(app_module):
    """The tick clears the run message once the run it was written for moves on (message_for). A button that wrote
    the message without marking it was wiped within 2 s when an earlier answer's mark was stale: "Chat with it" on a
    run just finished said "nothing to chat with yet" for one tick."""
    config = app_module.demo.get_config_file()
    ids = {c["props"].get("elem_id"): c["id"] for c in config["components"] if c["props"].get("elem_id")}
    message = ids["training-run-msg"]
    writers = [d for d in config["dependencies"] if message in d["outputs"]]
    stop = next(d for d in writers if (ids["training-stop"], "click") in map(tuple, d["targets"]))
    (mark,) = set(stop["outputs"]) - {message}
    buttons = [d for d in writers if mark not in d["inputs"]]  # the tick reads the mark; every other writer sets it
    clicked = {target for d in buttons for target, _ in d["targets"]}
    assert {ids["training-next-chat"], ids["training-next-eval"], ids["training-stop"]} <= clicked
    assert all(mark in d["outputs"] for d in buttons), [d["targets"] for d in buttons if mark not in d["outputs"]]
