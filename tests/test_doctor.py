"""The doctor's rules: recorded metric streams from real tiny runs, plus hand-built streams for collapses that
are hard to trigger on CPU (each commented with what it imitates)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_playground.doctor import Thresholds, diagnose, diagnose_crash

ROOT = Path(__file__).resolve().parents[1]

FIXTURES = Path(__file__).parent / "fixtures" / "metrics"


def load(name: str) -> list[dict]:
    rows = [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line.strip()]
    return [{k: float(v) if v in ("nan", "inf", "-inf") else v for k, v in r.items()} for r in rows]


def rules(findings, stage="grpo") -> set[str]:
    return {f.rule for f in findings if f.stage == stage}


def grpo_rows(n: int, **series) -> list[dict]:
    """n GRPO logging rows (every 5 steps); each keyword is a list of n values or one constant."""
    rows = []
    for i in range(n):
        row = {"stage": "grpo", "step": 5 * (i + 1), "max_steps": 5 * n}
        for key, values in series.items():
            row[key.replace("__", "/")] = values[i] if isinstance(values, list) else values
        rows.append(row)
    return rows


# --- recorded streams (real runs on the tiny model; see tests/fixtures/metrics/README.md) ----------------------

def test_healthy_run_has_no_error():
    findings = diagnose(load("healthy.jsonl"))
    assert not [f for f in findings if f.severity == "error"], findings


def test_grpo_without_sft_is_named_flat_reward_within_first_logging_steps():
    findings = [f for f in diagnose(load("grpo_without_sft.jsonl")) if f.rule in ("flat_reward", "zero_std")]
    assert findings, "GRPO on the base model must be diagnosed"
    assert min(f.step for f in findings) <= 3 * load("grpo_without_sft.jsonl")[0]["step"] + 10


@pytest.mark.parametrize("name", ["grpo_without_sft.jsonl", "high_lr.jsonl"])
def test_rollout_rules_see_through_steps_without_a_rollout(name):
    # grpo.num_iterations=2: TRL logs a rollout's reward, groups and lengths every other step only; the steps
    # between carry the loss side (loss, kl, clip ratios). Same run, same diagnosis, at the rollout steps.
    rows = load(name)
    interleaved = []
    for row in rows:
        interleaved.append(row)
        if row.get("stage", "grpo") == "grpo":
            interleaved.append({k: v for k, v in row.items() if k in ("stage", "max_steps", "loss", "kl", "grad_norm",
                                                                      "learning_rate") or k.startswith("clip_ratio")}
                               | {"step": row["step"] + 0.5})
    expected = {(f.rule, f.step) for f in diagnose(rows)}
    assert expected and {(f.rule, f.step) for f in diagnose(interleaved)} == expected


def test_high_learning_rate_run_is_diagnosed():
    # lr 3e-3 without KL: completions halved in length within 16 steps while the reward fell.
    findings = diagnose(load("high_lr.jsonl"))
    assert "length_falling" in rules(findings), findings


# --- hand-built streams -----------------------------------------------------------------------------------

def test_flat_reward_at_seed_value_with_zero_std_groups_is_an_error():
    # The seed's story: reward pinned at -2.0 (check_answer's no-match), every group all-equal.
    findings = diagnose(grpo_rows(4, reward=-2.0, reward_std=0.0, frac_reward_zero_std=1.0))
    flat = [f for f in findings if f.rule == "flat_reward"]
    assert flat and flat[0].severity == "error" and flat[0].step == 15
    assert "SFT" in flat[0].knob and "template" in flat[0].knob


def test_moving_reward_is_not_flat():
    findings = diagnose(grpo_rows(6, reward=[-2.0, -1.5, -1.0, -0.2, 0.5, 1.2], frac_reward_zero_std=0.2,
                                  reward_std=1.0))
    assert "flat_reward" not in rules(findings) and "zero_std" not in rules(findings)


def test_zero_std_groups_with_moving_mean():
    # Data too easy: most groups all-right, mean still drifts with the mix of prompts.
    findings = diagnose(grpo_rows(3, reward=[8.0, 9.0, 10.0], frac_reward_zero_std=[0.9, 0.85, 0.95]))
    assert rules(findings) == {"zero_std"}
    assert "temperature" in findings[0].knob


def test_kl_exponential_growth_and_absolute_blowup():
    # Imitates a GPU run at lr 5e-5: kl x4 per logging step.
    growth = diagnose(grpo_rows(3, reward=[1.0, 2.0, 3.0], kl=[0.02, 0.08, 0.32]))
    assert [f.rule for f in growth] == ["kl_blowup"] and growth[0].severity == "warning"
    assert "halve" in growth[0].knob and "beta" in growth[0].knob
    # From the first step, whose kl is exactly 0 (the policy is the reference): a finding, not a ZeroDivisionError
    # that killed the training job from inside its logging callback.
    first = diagnose(grpo_rows(3, reward=[1.0, 2.0, 3.0], kl=[0.0, 0.08, 0.32]))
    assert [f.rule for f in first] == ["kl_blowup"] and "from 0" in first[0].message

    high = diagnose(grpo_rows(1, kl=2.5))
    assert [f.rule for f in high] == ["kl_blowup"] and high[0].severity == "error"


def test_slowly_rising_kl_is_healthy():
    assert "kl_blowup" not in rules(diagnose(grpo_rows(5, reward=[0, 1, 2, 3, 4], kl=[0.01, 0.012, 0.015, 0.017, 0.02])))


def test_completion_length_falling():
    # A reward that prefers short answers: length 200 -> 80 tokens.
    findings = diagnose(grpo_rows(6, reward=[0, 1, 2, 3, 4, 5], completions__mean_length=[200, 205, 195, 120, 90, 80]))
    assert "length_falling" in rules(findings)


def test_length_pinned_at_maximum():
    findings = diagnose(grpo_rows(2, reward=[0, 1], completions__clipped_ratio=[0.7, 0.8]))
    assert rules(findings) == {"length_pinned"} and "max_completion_length" in findings[0].knob


def test_reward_hacking_truncation_while_correctness_at_no_match():
    # Seen on CPU at lr 2e-4: truncated completions 0% -> 99% while check_answer sat at -2.0.
    stream = grpo_rows(5, reward=[1.0, 1.1, 1.2, 1.3, 1.3], completions__clipped_ratio=[0.0, 0.2, 0.6, 0.9, 0.99],
                       rewards__check_answer__mean=[-1.0, -1.6, -1.9, -2.0, -2.0])
    hacking = [f for f in diagnose(stream) if f.rule == "reward_hacking"]
    assert hacking and hacking[0].severity == "error" and "-3.0" in hacking[0].knob
    # The same truncation with correctness improving is not hacking.
    honest = grpo_rows(5, reward=[1, 2, 3, 4, 5], completions__clipped_ratio=[0.0, 0.2, 0.6, 0.9, 0.99],
                       rewards__check_answer__mean=[-1.0, 0.0, 1.0, 2.0, 3.0])
    assert "reward_hacking" not in rules(diagnose(honest))


def test_reward_hacking_with_the_degamed_variant_uses_its_no_match_score():
    stream = grpo_rows(4, reward=[0, 0.1, 0.2, 0.2], completions__clipped_ratio=[0.1, 0.5, 0.8, 0.9],
                       rewards__check_answer_strict_nomatch__mean=[-3.0, -3.0, -2.9, -3.0])
    assert "reward_hacking" in rules(diagnose(stream))


def test_nan_loss_and_sft_loss_stuck():
    nan = diagnose(grpo_rows(2, loss=[0.1, float("nan")]))
    assert [f.rule for f in nan] == ["nan"] and nan[0].step == 10
    sft = [{"stage": "sft", "step": s, "max_steps": 100, "loss": 1.4} for s in (10, 50, 60)]
    stuck = diagnose(sft)
    assert rules(stuck, "sft") == {"sft_loss_stuck"} and stuck[0].step == 50


def test_each_rule_reported_once_per_stage():
    findings = diagnose(grpo_rows(10, reward=-2.0, frac_reward_zero_std=1.0))
    assert sorted(f.rule for f in findings) == ["flat_reward", "zero_std"]


def test_thresholds_are_configurable():
    stream = grpo_rows(3, reward=[0.0, 0.1, 0.2])
    assert "flat_reward" not in rules(diagnose(stream))
    assert "flat_reward" in rules(diagnose(stream, Thresholds(flat_range=0.5)))


@pytest.mark.parametrize("text, rule", [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "oom"),
    ("RuntimeError: CUDA error: device-side assert triggered", "device_assert"),
    ("RuntimeError: probability tensor contains either `inf`, `nan` or element < 0", "nan"),
    ("NaNError: loss became NaN at grpo step 12", "nan"),
    ("ValueError: something else entirely", None),
])
def test_crash_texts(text, rule):
    finding = diagnose_crash(text, step=12)
    assert (finding.rule if finding else None) == rule
    if finding:
        assert finding.knob


# The innermost frames of the two device-side asserts the GPU logs hold (results/gpu/h200_trl_nan/r1.log: NaN logits
# in HF sampling; results/gpu/h100_recipes35_lease5/space_e2e_try2: Qwen3's padded embedding cut, an id past it).
SAMPLING_FRAMES = """  File "transformers/generation/utils.py", line 3083, in _sample
    this_peer_finished = stop_check(unfinished_sequences, next_tokens, input_ids.shape[1])
  File "transformers/generation/utils.py", line 383, in __call__
    return bool(unfinished_sequences.max() == 0)
"""
EMBEDDING_FRAMES = """  File "torch/nn/modules/sparse.py", line 189, in forward
    return F.embedding(
  File "torch/nn/functional.py", line 2567, in embedding
    return torch.embedding(weight, input, padding_idx, scale_grad_by_freq, sparse)
"""


@pytest.mark.parametrize("frames, rule", [(SAMPLING_FRAMES, "nan"), (EMBEDDING_FRAMES, "token_id"), ("", "device_assert")])
def test_a_device_side_assert_is_named_by_where_it_happened(frames, rule):
    finding = diagnose_crash("AcceleratorError: CUDA error: device-side assert triggered", 3, "grpo", frames=frames)
    assert finding.rule == rule
    assert ("learning rate" in finding.message) == (rule == "nan")  # no blame on the learning rate for a bad id


def test_a_crashed_job_names_an_embedding_assert_from_its_own_traceback(tmp_path, monkeypatch):
    """What the user reads in the run's status: the job's handler reads the exception's frames, and an assert raised
    inside an embedding lookup is not blamed on the learning rate."""
    import torch

    from grpo_playground.config import load_recipe
    from grpo_playground.training import job

    def device_assert(*args, **kwargs):  # what torch.embedding raises on a GPU for an id past the rows
        raise torch.AcceleratorError("CUDA error: device-side assert triggered")

    def stage(*args, **kwargs):
        return torch.nn.Embedding(4, 2)(torch.tensor([9]))

    monkeypatch.setattr(torch, "embedding", device_assert)
    monkeypatch.setattr(job, "_run_stage", stage)
    monkeypatch.setattr(job, "_prepare_process", lambda cfg: None)  # it sets this process's torch threads
    assert job.run_job(load_recipe(ROOT / "recipes" / "tiny-cpu.yaml"), tmp_path / "run", stage="sft") == "failed"
    reason = json.loads((tmp_path / "run" / "status.json").read_text())["reason"]
    assert reason.startswith("a token id past the model's embedding rows") and "learning rate" not in reason, reason


def test_doctor_does_not_import_torch():
    code = "import sys, grpo_playground.doctor; print('torch' in sys.modules)"
    src = str(Path(__file__).resolve().parents[1] / "src")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONPATH": src})
    assert out.stdout.strip() == "False"
