"""What the Training tab shows of a run, computed from its files: chart frames, progress with ETA, the
latest sample group, doctor findings, run history. Pure functions over plain records (pandas, no torch),
so they are tested without a browser.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from grpo_playground.contracts.metrics import (
    CLIPPED_RATIO,
    COMPLETION_MAX_LENGTH,
    COMPLETION_MEAN_LENGTH,
    FRAC_REWARD_ZERO_STD,
    KL,
    LEARNING_RATE,
    LOSS,
    PER_REWARD_MEAN_RE,
    REWARD,
    REWARD_STD,
    TRAIN_RUNTIME,
)
from grpo_playground.jobs.feed import RunFeed
from grpo_playground.jobs.runs import RunInfo
from grpo_playground.contracts.layout import METRICS_FILE, RECIPE_FILE, RESUMES_KEY
from grpo_playground.contracts.states import ACTIVE_STATES, TRAINED_STAGES
from grpo_playground.step_timing import PHASES, clock, phase_key

CURRENT_STAGE = "current"


class Chart(NamedTuple):
    title: str
    series: list[tuple[str, str]] | str  # [(series label, metric key)], or the per-reward pattern
    stage: str | None  # None: both stages, told apart by series name; CURRENT_STAGE: the stage logged last
    kind: str = "line"  # line | stacked_bar (parts that add up to a whole)


# TRL's log keys (contracts.metrics).
CHARTS = [
    Chart("Reward (mean) and reward std", [("reward", REWARD), ("reward std", REWARD_STD)], "grpo"),
    Chart("Each reward function's mean", "rewards/*/mean", "grpo"),
    Chart("KL to the reference (beta > 0)", [("kl", KL)], "grpo"),
    Chart("Completion length (tokens)", [("mean", COMPLETION_MEAN_LENGTH), ("max", COMPLETION_MAX_LENGTH)],
          "grpo"),
    Chart("Truncated and zero-variance fractions",
          [("truncated (clipped_ratio)", CLIPPED_RATIO),
           ("zero-std groups (frac_reward_zero_std)", FRAC_REWARD_ZERO_STD)], "grpo"),
    # one stage at a time (the shown one): GRPO's 12 steps on SFT's 0-240 axis were a squashed blob at the left
    Chart("Loss", [("loss", LOSS)], CURRENT_STAGE),
    Chart("Learning rate", [("learning rate", LEARNING_RATE)], CURRENT_STAGE),
    # the phases add up to the whole step (`other` is the rest), so each bar is the step's wall time
    Chart("Where the step time went (s)", [(p.replace("_", " "), phase_key(p)) for p in PHASES], CURRENT_STAGE,
          "stacked_bar"),
]
FRAME_COLUMNS = ["step", "value", "series"]
# A completion cell: its start and its end, where the answer is (the table cut it at 240 characters from the start,
# before any <SOLUTION> a reader looks for); the sandbox gets the full text.
SAMPLE_CELL_CHARS = 240
SAMPLE_HEAD_CHARS = 60
ELISION = " [...] "


def completion_cell(text: str, chars: int = SAMPLE_CELL_CHARS) -> str:
    """`text` in at most `chars` characters: its first SAMPLE_HEAD_CHARS and as much of its end as fits."""
    if len(text) <= chars:
        return text
    return text[:SAMPLE_HEAD_CHARS] + ELISION + text[-(chars - SAMPLE_HEAD_CHARS - len(ELISION)):]


def _logged_rows(metrics: list[dict], stage: str | None) -> list[dict]:
    # the Trainer's end-of-training summary row (train_runtime, ...) is not a logging step
    return [m for m in metrics if TRAIN_RUNTIME not in m and (stage is None or m.get("stage") == stage)]


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def chart_frame(metrics: list[dict], series, stage: str | None) -> pd.DataFrame:
    """Long-form (step, value, series) rows of one chart; both stages are told apart by series name."""
    rows = []
    for m in _logged_rows(metrics, stage):
        pairs = series
        if isinstance(series, str):  # the per-reward pattern: whatever reward functions the run logged
            pairs = [(PER_REWARD_MEAN_RE.match(k).group(1), k) for k in m if PER_REWARD_MEAN_RE.match(k)]
        for label, key in pairs:
            value = _number(m.get(key))
            if value is not None and _number(m.get("step")) is not None:
                name = label if stage else f"{m.get('stage', '?')} {label}"
                rows.append((int(m["step"]), value, name))
    return pd.DataFrame(rows, columns=FRAME_COLUMNS)


def current_stage(metrics: list[dict]) -> str | None:
    """The stage logged last."""
    return next((m.get("stage") for m in reversed(_logged_rows(metrics, None))), None)


def chart_frames(metrics: list[dict], shown: str | None = None) -> list[pd.DataFrame]:
    """Each chart's frame; the per-stage charts show stage `shown` (None: the stage logged last)."""
    stage = shown or current_stage(metrics)
    frames = []
    for chart in CHARTS:
        frame = chart_frame(metrics, chart.series, stage if chart.stage == CURRENT_STAGE else chart.stage)
        if chart.kind == "stacked_bar":  # a phase the stage never spends time in (SFT's rollout) is no part
            spent = frame.groupby("series")["value"].transform("sum") if len(frame) else frame["value"]
            frame = frame[spent > 0].reset_index(drop=True)
        frames.append(frame)
    return frames


def compare_frame(runs: dict[str, list[dict]], key: str, stage: str | None) -> pd.DataFrame:
    """One metric of several runs on one chart: the series is the run id."""
    rows = [(int(m["step"]), _number(m[key]), run_id)
            for run_id, metrics in runs.items() for m in _logged_rows(metrics, stage)
            if _number(m.get(key)) is not None and _number(m.get("step")) is not None]
    return pd.DataFrame(rows, columns=FRAME_COLUMNS)


def progress(status: dict, metrics: list[dict]) -> dict:
    """Stage, step, fraction done and ETA of the current stage (from the pace of its logged steps)."""
    last = metrics[-1].get("stage") if metrics else None
    stage = status.get("stage") or last
    if stage not in TRAINED_STAGES and last:  # a finished `--stage all` job: the stage it ended in
        stage = last
    rows = [m for m in _logged_rows(metrics, stage) if _number(m.get("time")) and _number(m.get("step"))]
    if not rows and status.get("state") in ACTIVE_STATES and any(m.get("stage") not in (None, stage) for m in metrics):
        # the hand-over: status.json still holds the previous stage's max_steps and its ETA of 0
        return {"stage": stage, "step": 0, "max_steps": None, "fraction": None, "eta_s": None, "starting": True}
    step = status.get("step") or (rows[-1]["step"] if rows else 0)
    max_steps = status.get("max_steps") or (rows[-1].get("max_steps") if rows else None)
    eta = _number(status.get("eta_s"))  # the job's own estimate when it writes one
    if eta is None and len(rows) >= 2 and max_steps and rows[-1]["step"] > rows[0]["step"]:
        pace = (rows[-1]["time"] - rows[0]["time"]) / (rows[-1]["step"] - rows[0]["step"])
        eta = pace * max(0, max_steps - step)
    return {"stage": stage, "step": step, "max_steps": max_steps,
            "fraction": min(1.0, step / max_steps) if max_steps else None, "eta_s": eta, "starting": False}


def later_stage_budgets(info: RunInfo) -> list[tuple[str, float | None]]:
    """The stages this run's job will train, in order, each with its time budget in seconds (None: no budget),
    read from the run's recipe and job.json. [] when the recipe cannot be read."""
    from grpo_playground.config import load_recipe

    try:
        cfg = load_recipe(info.path / RECIPE_FILE)
    except (OSError, ValueError):
        return []
    stage = info.stage  # the job's stage as the UI started it (a CLI run: all)
    stages = [s for s in TRAINED_STAGES if getattr(cfg, s).enabled] if stage == "all" else [stage]
    return [(s, getattr(cfg, s).max_minutes * 60 if getattr(cfg, s).max_minutes else None)
            for s in stages if s in TRAINED_STAGES]


def overall_eta(stage: str | None, stage_eta: float | None, plan: list[tuple[str, float | None]]) -> str:
    """The time left across stages: this stage's ETA plus each later stage's time budget (its pace is unknown
    until it starts). '' when nothing follows the current stage."""
    names = [name for name, _ in plan]
    later = plan[names.index(stage) + 1:] if stage in names else []
    if not later or stage_eta is None:
        return ""
    if any(budget is None for _, budget in later):
        return " · then " + ", ".join(name for name, _ in later) + " (no time budget: ETA once it starts)"
    total = stage_eta + sum(budget for _, budget in later)
    return f" · at most {clock(total)} in all (then {', '.join(f'{n} up to {clock(b)}' for n, b in later)})"


# status.json key the job sets while a run waits after a pre-flight ERROR (training.job.PAUSED_KEY)
PAUSED_KEY = "paused_at_preflight"


def state_word(info: RunInfo) -> str:
    """The run's state as a user reads it: a run waiting after a pre-flight ERROR is paused, not stopped."""
    if info.state == "stopped" and info.status.get(PAUSED_KEY):
        return "paused before GRPO"
    return info.state


def progress_markdown(info: RunInfo, metrics: list[dict], plan: list[tuple[str, float | None]] = ()) -> str:
    p = progress(info.status, metrics)
    reason = info.status.get("reason")
    line = f"**{info.run_id}**: {state_word(info)}"
    if p["stage"]:
        line += f" · stage {p['stage']}"
    if p["starting"] and info.state == "running":
        line += " · starting (loading the model, then the pre-flight before GRPO)" if p["stage"] == "grpo" \
            else " · starting (loading the model)"
    if p["max_steps"]:
        filled = int(20 * (p["fraction"] or 0))
        line += f" · step {p['step']}/{p['max_steps']} `{'#' * filled}{'.' * (20 - filled)}` {p['fraction']:.0%}"
    if p["eta_s"] is not None and info.state == "running":
        line += f" · ETA {clock(p['eta_s'])} (this stage)" + overall_eta(p["stage"], p["eta_s"], list(plan))
    return line + (f"\n\n{reason}" if reason else "")


def sample_table(sample: dict | None) -> pd.DataFrame:
    """The latest sample group: one row per completion, each reward's score, the total and the advantage."""
    if not sample:
        return pd.DataFrame(columns=["#", "total", "advantage", "completion"])
    rewards = sample.get("rewards") or {}
    completions = sample.get("completions") or []
    rows = []
    for i, text in enumerate(completions):
        row = {"#": i}  # the numbers first: a long completion would push them out of view
        for key, label in (("total", "total"), ("advantages", "advantage")):
            values = sample.get(key) or []
            row[label] = _rounded(values[i]) if i < len(values) else None
        for name, scores in rewards.items():
            row[name] = _rounded(scores[i]) if i < len(scores) else None
        row["completion"] = completion_cell(str(text))
        rows.append(row)
    return pd.DataFrame(rows)


def _rounded(value, digits: int = 3):
    """Scores and advantages to 3 decimals: -0.3779644730092272 reads as -0.378."""
    number = _number(value)
    return round(number, digits) if number is not None else value


def sample_caption(sample: dict | None) -> str:
    if not sample:
        return "No sample completions yet (GRPO writes a group at each logging step)."
    totals = [t for t in sample.get("total") or [] if isinstance(t, (int, float))]
    zero_var = len(totals) > 1 and max(totals) == min(totals)
    text = f"Step {sample.get('step')} · answer **{sample.get('answer')}** · prompt: {str(sample.get('prompt'))[:400]}"
    if zero_var:
        text += ("\n\n**Every completion scored the same: zero advantage, no gradient from this group.** What to do: "
                 "if none is in the format, train SFT longer; if all gave the same answer, use problems nearer the "
                 "model's level (the `levels` of grpo_source) or raise grpo.temperature. Open the group in the Reward "
                 "sandbox to see each reward's reason.")
    return text


SEVERITIES = ("error", "warning", "info")  # most urgent first


def findings_caption(findings: list[dict]) -> str:
    """What the doctor's panel holds, in words that match it (an empty-table caption sat above an error)."""
    if not findings:
        return "**Doctor:** no problem seen in the metrics so far."
    counts = [f"{n} {sev}{'s' if n > 1 else ''}" for sev in SEVERITIES
              if (n := sum(f.get("severity") == sev for f in findings))]
    return f"**Doctor:** {len(findings)} finding{'s' if len(findings) > 1 else ''} ({', '.join(counts)}), " \
           "each with the knob to turn."


def findings_html(findings: list[dict]) -> str:
    """One card per finding, most urgent first: a coloured severity badge, the rule and step, the knob to turn
    and the message in plain words, all wrapped (a table cut the knob mid-word in the narrow column)."""
    rank = {sev: i for i, sev in enumerate(SEVERITIES)}
    cards = []
    for f in sorted(findings, key=lambda f: (rank.get(f.get("severity"), len(rank)), f.get("step") or 0)):
        severity = str(f.get("severity") or "info")
        cards.append(
            f'<div class="doctor-finding doctor-{escape(severity)}">'
            f'<span class="doctor-severity">{escape(severity.upper())}</span> '
            f'<b>{escape(str(f.get("rule")))}</b> at {escape(str(f.get("stage") or ""))} step {escape(str(f.get("step")))}'
            f'<div class="doctor-knob">Try: {escape(str(f.get("knob")))}</div>'
            f'<div class="doctor-message">{escape(str(f.get("message")))}</div></div>')
    return "".join(cards)


def doctor_findings(file_findings: list[dict], metrics: list[dict]) -> list[dict]:
    """The job's doctor.jsonl when it wrote one, else the doctor run here on the metrics (pure Python); a flat reward
    says how long it has lasted by now (its finding counted only the first window: "3 logged steps" of 12)."""
    from grpo_playground.doctor import diagnose, flat_streak

    findings = file_findings or [f.to_dict() for f in diagnose(metrics)]
    out = []
    for f in findings:
        streak = flat_streak(metrics, f.get("stage") or "grpo") if f.get("rule") == "flat_reward" else []
        if len(streak) > 1 and streak[0].get("step") <= f.get("step", 0) < streak[-1].get("step"):
            f = {**f, "message": f"{f.get('message')}; still flat at the latest step: {len(streak)} logged steps in "
                                 f"all (steps {streak[0].get('step')}-{streak[-1].get('step')})"}
        out.append(f)
    return out


def preflight_markdown(report: dict | None) -> str:
    """The pre-flight verdict in words: will GRPO see a signal from this model, and if not, why and what to do."""
    if not report:
        return "No pre-flight report for this run (the job writes one before GRPO starts)."
    level = str(report.get("level", "?"))
    text = f"**Pre-flight: {level.upper()}**. {report.get('why', '')}"
    if report.get("what_to_do"):
        text += f"\n\n**What to do:** {report['what_to_do']}"
    rate = _number(report.get("format_rate"))
    if rate is not None:
        text += (f"\n\nIn the format: {rate:.0%} of sampled completions; zero-variance groups: "
                 f"{report.get('zero_variance_groups')}/{report.get('groups_sampled')}.")
    tags = report.get("tag_tokens") or []
    if tags:
        text += "\n\nTags: " + "; ".join(f"`{t.get('tag')}` -> {t.get('n_tokens')} token(s)" for t in tags)
    return text


def export_markdown(state: dict) -> str:
    """The latest GGUF export of a run, in words (state from grpo_playground.jobs.exports.export_state): its
    files are downloaded beside it, and its checks are said plainly (the greedy f16-vs-HF match above all)."""
    if state["state"] == "none":
        return "Not exported yet: pick the stage and GGUF types and press Export (the Chat tab then lists the .gguf)."
    if state["state"] == "running":
        last = [line for line in state["log"].splitlines() if line.strip()][-1:]
        return "**Exporting...** " + (f"`{last[0][:200]}`" if last else "")
    if state["state"] == "failed":
        return f"**Export failed:** {state['reason']} (see export.log in the run folder)"
    names = ", ".join(f"`{Path(path).name}`" for path in state["files"])
    text = f"**Exported the {state.get('stage') or 'latest'} stage:** {names}. Download them below, or chat with it."
    checks = state.get("checks") or {}
    for name, check in checks.items():
        text += "\n- " + _check_line(name, check)
    if not checks:
        text += "\n- not checked (exported with --no-verify)"
    if state["problems"]:
        text += "\n\n**Checks that failed:** " + "; ".join(state["problems"])
    return text


def scale_out_markdown(state: dict) -> str:
    """The run written as a verl / OpenRLHF job, in words (state from jobs.scale_outs.scale_out_state)."""
    if state["state"] == "none":
        return ("When one GPU is not enough: write this run as a verl or OpenRLHF GRPO job (GRPO from its SFT "
                "adapter, scored by the same reward functions; docs/scale_out.md).")
    if state["state"] == "running":
        return "**Writing the verl / OpenRLHF job...**"
    if state["state"] == "failed":
        return f"**Scale-out failed:** {state['reason']}"
    notes = "".join(f"\n- {note}" for note in state["notes"]) or "\n- nothing: every GRPO setting has its key"
    return ("**Written:** `scale_out.zip` (reward.py, the data, run_verl.sh, run_openrlhf.sh, README.md). "
            "Not carried over:" + notes)


def _check_line(name: str, check: dict) -> str:
    """One export check in words: a greedy comparison (greedy_*) or a quantized file's answer (answers_*)."""
    if "cases" in check:
        cases = check["cases"]
        same = sum(bool(c.get("match")) for c in cases)
        what = "f16 GGUF" if name == "greedy_f16" else "base f16 GGUF + GGUF LoRA"
        verdict = "" if check.get("match") else " (**it differs**: see export.json)"
        return (f"{what} vs the HF model, greedy ({check.get('max_new_tokens')} tokens each): the same tokens on "
                f"**{same}/{len(cases)}** prompts{verdict}")
    answer = str(check.get("answer") or "").strip().replace("\n", " ")
    return (f"`{check.get('file')}` answered {'in the format' if check.get('in_format') else 'out of the format'}: "
            f"\"{answer[:120]}{'...' if len(answer) > 120 else ''}\"" if answer else f"`{check.get('file')}` gave an empty answer")


HISTORY_COLUMNS = ["run", "state", "stage", "step", "max_steps", "duration", "final reward", "resumed", "reason"]


def history_table(infos: list[RunInfo]) -> pd.DataFrame:
    """Every run in a row: where it got to, how long it took, where GRPO's reward ended (the mean of its last third
    of steps, as the run card says) and how often it was stopped and resumed."""
    rows = []
    for i in infos:
        reward = final_reward(i.path)
        resumes = i.status.get(RESUMES_KEY) or 0
        rows.append([i.run_id, state_word(i), i.status.get("stage"), i.status.get("step"), i.status.get("max_steps"),
                     run_duration(i.status), None if reward is None else round(reward, 2),
                     f"{resumes}×" if resumes else "", i.status.get("reason")])
    return pd.DataFrame(rows, columns=HISTORY_COLUMNS)


def run_duration(status: dict) -> str:
    """The run's training time: its stages' own seconds once it has them (a stopped run's pause is no part of it),
    else the time since it started."""
    seconds = [v for v in (status.get("stage_seconds") or {}).values() if _number(v) is not None]
    if seconds:
        return clock(sum(seconds))
    started, updated = _number(status.get("started")), _number(status.get("updated"))
    return clock(updated - started) if started and updated and updated >= started else ""


def last_third(values: list[float]) -> list[float]:
    """The last third of a run's steps (one step at least): what its reward ended at, less one step's noise."""
    return values[-max(1, len(values) // 3):]


# metrics.jsonl -> ((mtime_ns, size), final GRPO reward): the history is redrawn at every step of a running job
_final_rewards: dict[Path, tuple[tuple[int, int], float | None]] = {}


def final_reward(run_dir: Path) -> float | None:
    """The mean GRPO reward of the run's last third of steps; None before GRPO logged one."""
    path = Path(run_dir) / METRICS_FILE
    try:
        stat = path.stat()
    except OSError:
        return None
    key = (stat.st_mtime_ns, stat.st_size)
    cached = _final_rewards.get(path)
    if cached is None or cached[0] != key:
        feed = RunFeed(Path(run_dir))
        feed.poll()
        rewards = [m[REWARD] for m in feed.metrics if m.get("stage") == "grpo" and _number(m.get(REWARD)) is not None]
        tail = last_third(rewards)
        cached = _final_rewards[path] = (key, sum(tail) / len(tail) if tail else None)
    return cached[1]
