"""The doctor: names a collapse from the metrics stream, in plain words, with the knob to turn.

Pure Python, no torch: the UI, the job supervisor and the training callbacks import it (it sits outside training/
because the app process never imports that package). Each rule is a row of the collapse table in docs/doctor.md
turned into a test over a sliding window of logged rows; thresholds live in `Thresholds`, documented there too. `diagnose(metrics)` replays the stream and reports each
rule once per stage, at the first logged step where it fires. `diagnose_crash(text)` turns a crash's
error text (OOM, NaN logits, a token id past the embedding, another device-side assert) into the same kind of
finding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grpo_playground.contracts.findings import Finding
from grpo_playground.contracts.metrics import (
    CLIPPED_RATIO,
    COMPLETION_MEAN_LENGTH,
    FRAC_REWARD_ZERO_STD,
    KL,
    LOSS,
    NAN_WATCHED,
    REWARD,
    REWARD_STD,
    reward_mean_key,
)


@dataclass(frozen=True)
class Thresholds:
    window: int = 3  # logged rows a trend rule looks at (3 rows = 15 steps at the seed's logging_steps 5)
    flat_range: float = 0.05  # reward mean moving less than this over the window is "flat"
    zero_std_frac: float = 0.8  # frac_reward_zero_std at or above this: groups give no gradient
    low_reward_std: float = 0.02  # reward_std below this (when frac_reward_zero_std is not logged)
    kl_high: float = 1.0  # kl above this is a blow-up whatever the trend
    kl_growth: float = 4.0  # kl multiplied by this over the window, each row higher: exponential growth
    kl_floor: float = 0.05  # ignore growth of a kl still this small
    length_drop: float = 0.4  # mean completion length 40% under its early level
    clipped_high: float = 0.5  # completions/clipped_ratio above this: lengths pinned at the maximum
    hacking_rise: float = 0.3  # clipped ratio rising this much over the stream...
    correctness_no_match_margin: float = 0.25  # ...while correctness sits within this of its no-match score
    sft_loss_stuck: float = 1.0  # SFT loss still above this after half the steps: broken preprocessing


# Correctness rewards and the score they give when no answer can be extracted (recipe.md: seed -2.0;
# the de-gamed variant puts no-match at -3.0, below any wrong answer).
NO_MATCH_SCORES = {"check_answer": -2.0, "check_answer_strict_nomatch": -3.0}

KNOBS = {
    "flat_reward": "print the first sampled completions (samples.jsonl or the Reward sandbox) and compare them with "
                   "the reward regex; run SFT first; fix the chat template or the tags (register them as ordinary "
                   "added tokens, not special tokens)",
    "zero_std": "mix easier and harder problems (levels in the data source, e.g. generator:train?levels=1-3), raise "
                "grpo.temperature to 1.0-1.2, or raise grpo.num_generations",
    "kl_blowup": "halve grpo.learning_rate (e.g. 5e-6 -> 2e-6); raise grpo.beta (0.04 -> 0.1); keep LoRA on all "
                 "seven projections",
    "length_falling": "inspect the rewards for one that prefers short answers (Reward sandbox); add a length term",
    "length_pinned": "raise grpo.max_completion_length (1024 -> 1536 / 2048): truncation cuts off the solution tag",
    "reward_hacking": "make no-match score below any wrong answer (e.g. the -3.0 check_answer variant) or enable "
                      "match_format_exactly; set grpo.mask_truncated_completions",
    "nan": "divide the learning rate by 10; clip or shrink the reward weights",
    "token_id": "make the model's embedding at least as long as the tokenizer (len(tokenizer) <= embedding rows; "
                "data.register_tags grows it for the tags); with vLLM, load the base it was trained on",
    "device_assert": "rerun with CUDA_LAUNCH_BLOCKING=1 to see the kernel that failed; if the loss or grad_norm "
                     "rose before the crash, divide the learning rate by 10",
    "oom": "lower grpo.num_generations, grpo.max_completion_length or per_device_train_batch_size; lower "
           "model.gpu_memory_utilization when vLLM shares the GPU; use model.load_in_4bit",
    "sft_loss_stuck": "check the SFT data: print one rendered example (prompt + completion) and its tokens; a loss "
                      "stuck above 1.0 means broken preprocessing",
}


def _num(row: dict, key: str) -> float | None:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _series(rows: list[dict], key: str) -> list[float]:
    return [v for v in (_num(r, key) for r in rows) if v is not None]


def _correctness_key(row: dict) -> tuple[str, float] | None:
    for name, no_match in NO_MATCH_SCORES.items():
        if reward_mean_key(name) in row:
            return reward_mean_key(name), no_match
    return None


def _rule_nan(rows, th):
    row = rows[-1]
    bad = [k for k in NAN_WATCHED if (v := _num(row, k)) is not None and not math.isfinite(v)]
    if bad:
        return "error", f"{', '.join(bad)} became NaN/inf: the update blew up (learning rate too high or rewards too large)"
    return None


def _rule_flat_reward(rows, th):
    window = rows[-th.window:]
    rewards = _series(window, REWARD)
    if len(window) < th.window or len(rewards) < th.window:
        return None
    if max(rewards) - min(rewards) >= th.flat_range:
        return None
    zero_std = _series(window, FRAC_REWARD_ZERO_STD)
    severity = "error" if zero_std and min(zero_std) >= th.zero_std_frac else "warning"
    return severity, (
        f"reward mean flat at {rewards[-1]:.2f} for {len(window)} logged steps: the model's output probably never "
        "matches the reward regex (the seed's story: every completion scored the same, advantage 0, gradient 0)")


def _rule_zero_std(rows, th):
    window = rows[-th.window:]
    if len(window) < th.window:
        return None
    fracs = _series(window, FRAC_REWARD_ZERO_STD)
    if len(fracs) == len(window):
        if min(fracs) < th.zero_std_frac:
            return None
        return "warning", (f"{sum(fracs) / len(fracs):.0%} of groups have zero reward variance: all-right or all-wrong "
                           "groups give no advantage and no gradient")
    stds = _series(window, REWARD_STD)
    if len(stds) == len(window) and max(stds) < th.low_reward_std:
        return "warning", f"reward std ~{max(stds):.3f}: completions of a prompt all score alike, no gradient"
    return None


def _rule_kl_blowup(rows, th):
    kls = _series(rows[-th.window:], KL)
    if not kls:
        return None
    if kls[-1] > th.kl_high:
        return "error", f"kl reached {kls[-1]:.3g}: the policy ran far from the reference (gibberish follows)"
    rising = len(kls) == th.window and all(b > a for a, b in zip(kls, kls[1:]))
    if rising and kls[-1] > th.kl_floor and kls[-1] >= th.kl_growth * max(kls[0], 1e-12):
        growth = f"{kls[-1] / kls[0]:.1f}x" if kls[0] > 0 else "from 0"  # the first step's kl is 0: policy = reference
        return "warning", f"kl grew {growth} in {th.window} logged steps ({kls[0]:.3g} -> {kls[-1]:.3g})"
    return None


def _rule_length_falling(rows, th):
    lengths = _series(rows, COMPLETION_MEAN_LENGTH)
    if len(lengths) < 2 * th.window:
        return None
    early = sum(lengths[: th.window]) / th.window
    late = sum(lengths[-th.window:]) / th.window
    if early > 0 and late <= (1 - th.length_drop) * early:
        return "warning", (f"mean completion length fell from {early:.0f} to {late:.0f} tokens: a reward may prefer "
                           "short answers (the reasoning is being cut)")
    return None


def _rule_length_pinned(rows, th):
    clipped = _series(rows[-2:], CLIPPED_RATIO)
    if len(clipped) == 2 and min(clipped) >= th.clipped_high:
        return "warning", (f"{clipped[-1]:.0%} of completions hit max_completion_length: truncation removes the "
                           "solution tag, so correct work scores as no answer")
    return None


def _rule_reward_hacking(rows, th):
    key = _correctness_key(rows[-1])
    clipped = _series(rows, CLIPPED_RATIO)
    if key is None or len(clipped) < th.window:
        return None
    name, no_match = key
    correctness = _series(rows[-th.window:], name)
    rise = clipped[-1] - min(clipped)
    stuck = correctness and max(abs(c - no_match) for c in correctness) <= th.correctness_no_match_margin
    if rise >= th.hacking_rise and clipped[-1] >= th.clipped_high and stuck:
        return "error", (f"reward hacking: truncated completions rose to {clipped[-1]:.0%} while {name} sits at its "
                         f"no-match score {no_match}: writing no answer pays better than a wrong one")
    return None


def _rule_sft_loss_stuck(rows, th):
    row = rows[-1]
    loss, step, max_steps = _num(row, LOSS), _num(row, "step"), _num(row, "max_steps")
    if loss is None or not step or not max_steps or step < max_steps / 2:
        return None
    if loss > th.sft_loss_stuck:
        return "warning", f"SFT loss still {loss:.2f} at step {step:.0f}/{max_steps:.0f} (a healthy SFT falls under 0.5)"
    return None


def flat_streak(metrics: list[dict], stage: str = "grpo", th: Thresholds = Thresholds()) -> list[dict]:
    """The latest rollout rows of `stage` whose reward means all lie within flat_range: how long a flat reward has
    lasted by now (the finding was written when the first window went flat, and says only that window)."""
    rows = [r for r in metrics if r.get("stage", "grpo") == stage and _num(r, REWARD) is not None]
    streak: list[dict] = []
    for row in reversed(rows):
        values = [_num(r, REWARD) for r in [row, *streak]]
        if max(values) - min(values) >= th.flat_range:
            break
        streak.insert(0, row)
    return streak


GRPO_RULES = {"nan": _rule_nan, "flat_reward": _rule_flat_reward, "zero_std": _rule_zero_std,
              "kl_blowup": _rule_kl_blowup, "length_falling": _rule_length_falling,
              "length_pinned": _rule_length_pinned, "reward_hacking": _rule_reward_hacking}
SFT_RULES = {"nan": _rule_nan, "sft_loss_stuck": _rule_sft_loss_stuck}
# Rules over what a rollout logs (reward, groups, lengths). With grpo.num_iterations > 1 TRL generates every
# num_iterations steps and the steps between log only the loss side: these rules read the rollout rows alone.
ROLLOUT_RULES = {"flat_reward", "zero_std", "length_falling", "length_pinned", "reward_hacking"}


def diagnose(metrics: list[dict], thresholds: Thresholds = Thresholds()) -> list[Finding]:
    """Every rule that fires on the stream, once per (stage, rule), at the first logged step where it fires."""
    findings: list[Finding] = []
    fired: set[tuple[str, str]] = set()
    by_stage: dict[str, list[dict]] = {}
    rollouts_by_stage: dict[str, list[dict]] = {}
    for row in metrics:
        stage = row.get("stage", "grpo")
        rows = by_stage.setdefault(stage, [])
        rows.append(row)
        rollouts = rollouts_by_stage.setdefault(stage, [])
        is_rollout = REWARD in row
        if is_rollout:
            rollouts.append(row)
        rules = GRPO_RULES if stage == "grpo" else SFT_RULES
        for name, rule in rules.items():
            if (stage, name) in fired or (name in ROLLOUT_RULES and not is_rollout):
                continue
            verdict = rule(rollouts if name in ROLLOUT_RULES else rows, thresholds)
            if verdict:
                severity, message = verdict
                fired.add((stage, name))
                findings.append(Finding(severity, message, name, KNOBS[name], int(row.get("step", len(rows))), stage))
    return findings


# --- stop on critical (doctor.stop_on_critical): conditions under which more steps cannot help --------------------
# Each sees this stage's rows logged since the trainer started (a resumed run gets `steps` fresh rows to recover).
FULL = 1.0 - 1e-9  # a logged share of 1.0 ("every group", "every completion"), as a float


def _every_rollout(rows: list[dict], key: str, steps: int) -> list[dict] | None:
    """The last `steps` rollout rows when each has `key` at 1.0 and the newest row is one of them, else None."""
    rollouts = [r for r in rows if REWARD in r][-steps:]
    if len(rollouts) < steps or rollouts[-1] is not rows[-1]:
        return None
    return rollouts if all((_num(r, key) or 0.0) >= FULL for r in rollouts) else None


def critical_finding(rows: list[dict], steps: int, stage: str = "grpo") -> Finding | None:
    """The critical condition the newest row completes, or None: NaN loss or gradient; every group with zero reward
    variance for `steps` logged rollouts in a row (no gradient at all); every completion truncated for as many."""
    if not rows:
        return None
    step = int(_num(rows[-1], "step") or len(rows))
    nan = _rule_nan(rows, Thresholds())
    if nan:
        return Finding("error", nan[1], "nan", KNOBS["nan"], step, stage)
    if window := _every_rollout(rows, FRAC_REWARD_ZERO_STD, steps):
        return Finding("error", (
            f"every group had zero reward variance for {steps} logged steps in a row (steps {window[0].get('step')}"
            f"-{step}): every completion of a prompt scored the same, so no step changed the weights"),
            "zero_std", KNOBS["zero_std"], step, stage)
    if window := _every_rollout(rows, CLIPPED_RATIO, steps):
        return Finding("error", (
            f"every completion hit max_completion_length for {steps} logged steps in a row (steps "
            f"{window[0].get('step')}-{step}): none reaches the solution tag, so none can score as correct"),
            "length_pinned", KNOBS["length_pinned"], step, stage)
    return None


def diagnose_crash(error_text: str, step: int = 0, stage: str = "grpo", frames: str = "") -> Finding | None:
    """A crash's error text -> a finding (None when it is not a known collapse). `frames`: the innermost frames of
    its traceback, which tell a CUDA device-side assert in sampling (NaN logits) from one in an embedding lookup (a
    token id past the rows, as when Qwen3's padded embedding was cut: issue 35): the error text is the same."""
    text, where = error_text.lower(), frames.lower()
    if "out of memory" in text or "outofmemoryerror" in text or "cannot allocate memory" in text:
        return Finding("error", "out of memory: the group or the context is too large for the device", "oom",
                       KNOBS["oom"], step, stage)
    nan_text = "probability tensor contains" in text or "nan" in _words(text)
    if "device-side assert" in text and not nan_text:
        if any(cue in where for cue in ("probability tensor contains", "multinomial", "_sample", "sampler")):
            return Finding("error", "NaN logits ('device-side assert triggered' in sampling): the learning rate is "
                           "too high and the weights blew up", "nan", KNOBS["nan"], step, stage)
        if "embedding" in where or "index_select" in where or "srcindex" in where:
            return Finding("error", "a token id past the model's embedding rows ('device-side assert triggered' in "
                           "an embedding lookup): the tokenizer or the sampler has ids the model has no row for",
                           "token_id", KNOBS["token_id"], step, stage)
        return Finding("error", "a CUDA kernel's own check failed ('device-side assert triggered'): most often NaN "
                       "logits in sampling, else a token id past the embedding", "device_assert",
                       KNOBS["device_assert"], step, stage)
    if nan_text:
        return Finding("error", "NaN logits or loss: the learning rate is too high and the weights blew up", "nan",
                       KNOBS["nan"], step, stage)
    return None


def _words(text: str) -> set[str]:
    import re

    return set(re.findall(r"[a-z]+", text))
