"""doctor.stop_on_critical (issue 39 item 12): the doctor stops a run that more steps cannot help, with a checkpoint,
the step to resume from and the setting to turn. The rules are pure functions over metric rows; one real GRPO run
on the embedded tiny model shows the stop, the checkpoint on disk and a resume from it."""

from __future__ import annotations

import json
import math

import pytest

from grpo_playground.doctor import critical_finding


def rollout(step: int, zero_std: float = 0.0, clipped: float = 0.0, loss: float = 0.1) -> dict:
    return {"stage": "grpo", "step": step, "loss": loss, "grad_norm": 0.5, "reward": -3.0,
            "frac_reward_zero_std": zero_std, "completions/clipped_ratio": clipped}


@pytest.mark.parametrize("rows,rule", [
    # every group zero-variance for 3 logged steps in a row: no gradient at all
    ([rollout(1, 1.0), rollout(2, 1.0), rollout(3, 1.0)], "zero_std"),
    # every completion truncated for 3 logged steps: none reaches the solution tag
    ([rollout(1, clipped=1.0), rollout(2, clipped=1.0), rollout(3, clipped=1.0)], "length_pinned"),
    # NaN stops at once, whatever the window
    ([rollout(1, loss=math.nan)], "nan"),
    ([rollout(1), {**rollout(2), "grad_norm": math.inf}], "nan"),
])
def test_critical_conditions_fire(rows, rule):
    finding = critical_finding(rows, 3)
    assert finding is not None and finding.rule == rule and finding.severity == "error"
    assert finding.step == rows[-1]["step"] and finding.knob


@pytest.mark.parametrize("rows", [
    [rollout(1, 1.0), rollout(2, 1.0)],                      # not yet 3 logged steps
    [rollout(1, 1.0), rollout(2, 0.75), rollout(3, 1.0)],   # one group learned in between: not "every" for 3 in a row
    [rollout(1, 0.99), rollout(2, 0.99), rollout(3, 0.99)], # most, not every, group: the warning's job, not a stop
    [rollout(1, clipped=1.0), rollout(2, clipped=0.9), rollout(3, clipped=1.0)],
    # the newest row is a loss-only row (num_iterations > 1): the rollout window already fired or not at its own row
    [rollout(1, 1.0), rollout(2, 1.0), rollout(3, 1.0), {"stage": "grpo", "step": 4, "loss": 0.1}],
    [],
])
def test_no_stop_without_a_full_window(rows):
    assert critical_finding(rows, 3) is None


def test_stop_on_critical_is_an_opt_in_recipe_key():
    from grpo_playground.config import ConfigError, RunConfig, recipe_from_text

    assert RunConfig().doctor.stop_on_critical is False
    cfg = recipe_from_text("doctor:\n  stop_on_critical: true\n  critical_steps: 2\n")
    assert (cfg.doctor.stop_on_critical, cfg.doctor.critical_steps) == (True, 2)
    with pytest.raises(ConfigError, match="doctor.critical_steps"):
        recipe_from_text("doctor:\n  critical_steps: 0\n")


@pytest.mark.slow
def test_a_real_run_stops_with_a_checkpoint_and_resumes_from_it(tmp_path, monkeypatch):
    from test_resume import adapter, distance, train

    from grpo_playground.contracts.layout import DOCTOR_FILE, STATUS_FILE

    run_dir = tmp_path / "run"
    # From the untrained tiny model nothing is ever in the strict format: match_format_exactly gives every
    # completion 0, every group has zero variance, and GRPO cannot learn. 6 steps asked; the doctor stops at 2.
    stuck = ("rewards.weights={match_format_exactly: 1.0}", "grpo.max_steps=6", "doctor.stop_on_critical=true",
             "doctor.critical_steps=2")
    assert train(run_dir, "grpo", monkeypatch, overrides=stuck) == "stopped"
    status = json.loads((run_dir / STATUS_FILE).read_text())
    assert status["state"] == "stopped" and status["step"] == 2
    reason = status["reason"]
    assert "Stopped by the doctor at grpo step 2" in reason and "zero reward variance" in reason
    assert "resume from checkpoint-2" in reason and "grpo.temperature" in reason  # the step and the knob
    checkpoint = run_dir / "checkpoints" / "grpo" / "checkpoint-2"
    assert (checkpoint / "adapter_model.safetensors").is_file() and (checkpoint / "optimizer.pt").is_file()
    assert not (run_dir / "grpo").exists()  # the stage is not finished: its adapter is not written, Resume runs it
    stops = [json.loads(line) for line in (run_dir / DOCTOR_FILE).read_text().splitlines() if '"stopped"' in line]
    assert [(s["rule"], s["resume_step"]) for s in stops] == [("zero_std", 2)]
    # the knob turned (a reward that differs within a group even for random text), the run goes on from
    # checkpoint-2 to its end (the doctor off: 24 tokens truncate every completion of an untrained model, and it
    # would stop that next, rightly)
    # The shaped rewards run inside TRL here: soft_overlong reads TRL's completion_ids (every completion of the
    # untrained model runs to the 24-token limit: -1 each, whatever its characters say)
    turned = ("rewards.weights={cosine_scaled: 1.0, soft_overlong: 1.0, repetition_penalty: 1.0}",
              "rewards.overlong_buffer=8", "grpo.max_steps=6", "grpo.temperature=1.2")
    saved = adapter(checkpoint)
    outcome = train(run_dir, "grpo", monkeypatch, resume=True, overrides=turned)
    status = json.loads((run_dir / STATUS_FILE).read_text())
    assert outcome == "finished", status.get("reason")
    assert status["step"] == 6
    assert distance(adapter(run_dir / "grpo"), saved) > 0  # steps 3-6 trained on from checkpoint-2's weights
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    resumed = [r for r in rows if r.get("stage") == "grpo" and "rewards/soft_overlong/mean" in r]
    assert [r["step"] for r in resumed] == [3, 4, 5, 6]
    # a truncated completion scores -1, any other at most 0: the mean is at most minus the truncated share, and
    # exactly -1 when all are truncated (an estimate from characters would not land on the limit)
    pairs = [(r["rewards/soft_overlong/mean"], r["completions/clipped_ratio"]) for r in resumed]
    assert all(score <= -clipped + 1e-6 for score, clipped in pairs), pairs
    assert any(clipped == 1.0 for _, clipped in pairs) and all(score == -1.0 for score, c in pairs if c == 1.0), pairs


def _log_nan(tmp_path, critical_steps):
    from types import SimpleNamespace

    from grpo_playground.training.callbacks import RunCallback
    from grpo_playground.training.run_folder import RunFolder

    folder = RunFolder(tmp_path)
    (folder.checkpoints("grpo") / "checkpoint-4").mkdir(parents=True)  # saved before the blow-up
    tracker = SimpleNamespace(log_metrics=lambda row: None, log_sample=lambda sample: None)
    callback = RunCallback(folder, "grpo", tracker, [], None, critical_steps=critical_steps)
    # step 6 is a save step too: Trainer set should_save before the log
    control = SimpleNamespace(should_log=True, should_save=True, should_training_stop=False)
    state = SimpleNamespace(global_step=6, max_steps=10)
    callback.on_log(SimpleNamespace(world_size=1), state, control, logs={"loss": math.nan, "grad_norm": math.nan})
    return folder, callback, control


def test_a_nan_stops_without_saving_the_blown_up_weights_and_names_the_checkpoint_before(tmp_path):
    folder, callback, control = _log_nan(tmp_path, 3)
    assert callback.stopped_by == "doctor" and control.should_training_stop
    assert control.should_save is False  # this step's update may have written NaN into the weights
    reason = folder.read_status()["reason"]
    assert "Stopped by the doctor at grpo step 6" in reason and "NaN" in reason
    assert "resume from checkpoint-4 (step 4), the last checkpoint before the NaN" in reason
    assert "divide the learning rate by 10" in reason


def test_without_the_option_a_nan_still_fails_the_job(tmp_path):
    from grpo_playground.training.callbacks import NaNError

    with pytest.raises(NaNError):
        _log_nan(tmp_path, None)
