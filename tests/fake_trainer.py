"""A stand-in for the training child that learns nothing and starts in a fraction of a second: the real job
(`grpo_playground.cli.train.main` -> `training.job.run_job`: arguments, recipe, status.json, stop, resume, crash,
stages in order) with only the model's parts replaced. No torch, no transformers, no TRL: each step writes what the
real trainer's callback writes (status, a metrics row with TRL's keys, a GRPO sample group, the doctor's findings,
checkpoints/<stage>/checkpoint-N, the stage's adapter folder) and sleeps STEP_S.

    python tests/fake_trainer.py --config RUN/recipe.yaml --run-dir RUN [--stage all|sft|grpo|preflight] [--resume]

For tests of plumbing (the UI, jobs, the queue, stop and resume as the app sees them), never of learning or weights:
its adapters hold no weights. tests/test_fake_trainer.py runs it and the real trainer on one scenario and holds
them to the same files, keys and state transitions. Tests start it with the `fake_trainer` fixture (conftest.py).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
if str(SRC) not in sys.path:  # run as a script by the job's supervisor
    sys.path.insert(0, str(SRC))

from grpo_playground.contracts.layout import (  # noqa: E402
    ADAPTER_CONFIG,
    DOCTOR_FILE,
    METRICS_FILE,
    PREFLIGHT_FILE,
    SAMPLES_FILE,
)
from grpo_playground.contracts.metrics import reward_mean_key  # noqa: E402
from grpo_playground.step_timing import PHASES, STEP_KEY, phase_key  # noqa: E402
from grpo_playground.training.save_clock import SaveClock  # noqa: E402

TRAINER_STATE = "trainer_state.json"  # transformers' name, in each checkpoint folder
STEP_S = 0.05  # a step's wall time: long enough for a test to see a running job, short enough to finish many

# What TRL 1.14.2 logs on a logging step (tests/test_fake_trainer.py holds these to a real run's rows)
SFT_LOGGED = ("entropy", "epoch", "grad_norm", "learning_rate", "loss", "mean_token_accuracy", "num_tokens")
GRPO_LOGGED = ("clip_ratio/high_max", "clip_ratio/high_mean", "clip_ratio/low_mean", "clip_ratio/low_min",
               "clip_ratio/region_mean", "completions/clipped_ratio", "completions/max_length",
               "completions/max_terminated_length", "completions/mean_length", "completions/mean_terminated_length",
               "completions/min_length", "completions/min_terminated_length", "entropy", "epoch",
               "frac_reward_zero_std", "grad_norm", "learning_rate", "loss", "num_tokens", "reward", "reward_std",
               "rollout/tokens", "step_time")
COMPLETIONS = ("7 + 5 = 12<end_working_out><SOLUTION>12</SOLUTION>", "7 + 5 = 13<end_working_out><SOLUTION>13",
               "it is 12", "7 + 5 = 12<end_working_out><SOLUTION>12</SOLUTION>")


@dataclass
class Result:  # training.stages.StageResult's fields, which run_job reads
    stage: str
    steps: int
    seconds: float
    stopped_by: str


@dataclass
class Policy:  # training.backend.Policy's fields that run_job reads
    start_adapter: Path | None
    backend: str = "fake"
    device: str = "cpu"
    notes: tuple = ()


def load_policy(cfg, stage: str, start_adapter: Path | None = None) -> Policy:
    return Policy(start_adapter)


def run_preflight(cfg, policy: Policy, folder, sft_done: bool) -> dict:
    """preflight.json with the real report's keys: an "ok" verdict over groups of the fixed completions."""
    n = cfg.grpo.num_generations
    completions = [COMPLETIONS[i % len(COMPLETIONS)] for i in range(n)]
    rewards = {name: [float(i % 3) for i in range(n)] for name in cfg.rewards.weights}
    group = {"problem": "Mia has 7 apples and finds 5. How many?", "answer": "12", "completions": completions,
             "rewards": rewards, "total": [0.0] * n, "advantages": [0.0] * n, "std": 1.0, "zero_variance": False,
             "zero_variance_reason": "", "in_format": [c.endswith("</SOLUTION>") for c in completions]}
    report = {"level": "ok", "why": "fake trainer: nothing sampled", "what_to_do": "", "format_rate": 0.5,
              "zero_variance_groups": 0, "groups_sampled": cfg.grpo.preflight_prompts, "sft_done": sft_done,
              "tag_tokens": [], "template": {}, "groups": [group] * cfg.grpo.preflight_prompts}
    folder.write_json(PREFLIGHT_FILE, report)
    folder.log("pre-flight [ok]: fake trainer")
    return report


def stage_runner(stage: str):
    """run_sft / run_grpo: the Trainer's loop as the job's RunCallback records it (training/callbacks.py)."""

    def run(cfg, folder, policy, tracker, history: list[dict], resume: bool) -> Result:
        from grpo_playground.doctor import diagnose
        from grpo_playground.training.progress import eta_seconds

        settings = getattr(cfg, stage)
        max_steps = settings.max_steps
        last = folder.last_checkpoint(stage) if resume else None
        first = int(last.name.split("-")[-1]) if last else 0
        if last:
            folder.log(f"{stage}: resuming from {last.name}")
        reported = {(f["stage"], f["rule"]) for f in folder.read_jsonl(DOCTOR_FILE)}
        started, stopped_by, step = time.time(), "", first
        clock = SaveClock(settings.save_minutes)
        clock.start(started)
        folder.status(state="running", stage=stage, step=first, max_steps=max_steps)
        for step in range(first + 1, max_steps + 1):
            time.sleep(STEP_S)
            timing = {phase_key(p): STEP_S / len(PHASES) for p in PHASES} | {STEP_KEY: STEP_S}
            row = {"stage": stage, "step": step, "max_steps": max_steps, "time": time.time()}
            if step == 1 or step % settings.logging_steps == 0:  # logging_first_step, as the job sets it
                row |= logged(cfg, stage, step, max_steps)
                history.append(row)
                if stage == "grpo":
                    folder.append(SAMPLES_FILE, sample(cfg, step))
            folder.append(METRICS_FILE, row | timing)
            tracker.log_metrics(row | timing)
            for finding in diagnose(history):
                if (finding.stage, finding.rule) not in reported:
                    reported.add((finding.stage, finding.rule))
                    folder.append(DOCTOR_FILE, finding.to_dict())
            folder.status(step=step, max_steps=max_steps,
                          eta_s=eta_seconds(step, max_steps, first, started, budget_s=budget_s(settings)))
            if folder.stop_requested():
                stopped_by = "stop"
            elif settings.max_minutes and time.time() - started >= settings.max_minutes * 60:
                stopped_by = "time"
            if stopped_by and step >= max_steps:
                stopped_by = ""  # asked at the last step: the stage ends as finished
            timed = clock.due(time.time())
            if timed:
                clock.saving(time.time())
            if stopped_by or timed or step % settings.save_steps == 0:
                save(folder.checkpoints(stage) / f"checkpoint-{step}", step)
                rotate(folder.checkpoints(stage), settings.save_total_limit)
            if stopped_by:
                break
        if stopped_by != "stop":
            save(folder.adapter(stage))
            folder.log(f"{stage}: adapter saved in {folder.adapter(stage)}")
        return Result(stage, step, time.time() - started, stopped_by)

    return run


def budget_s(settings) -> float | None:
    return settings.max_minutes * 60 if settings.max_minutes else None


def logged(cfg, stage: str, step: int, max_steps: int) -> dict:
    """A logging step's values: a loss that falls and a reward that rises, both finite."""
    progress = step / max(max_steps, 1)
    keys = SFT_LOGGED if stage == "sft" else GRPO_LOGGED + (("kl",) if cfg.grpo.beta > 0 else ())
    row = dict.fromkeys(keys, 0.5) | {"loss": 1.0 - 0.9 * progress, "learning_rate": 1e-4, "epoch": progress}
    if stage == "grpo":
        row |= {"reward": -1.0 + 3.0 * progress, "reward_std": 1.0, "frac_reward_zero_std": 0.0,
                "completions/clipped_ratio": 0.75}  # the doctor names length_pinned: a finding to show
        for name in cfg.rewards.weights:
            row |= {reward_mean_key(name): progress, f"rewards/{name}/std": 0.5}
    return row


def sample(cfg, step: int) -> dict:
    """One group, as SampleRecorder.sample writes it."""
    n = cfg.grpo.num_generations
    completions = [COMPLETIONS[i % len(COMPLETIONS)] for i in range(n)]
    rewards = {name: [float((i + step) % 3) for i in range(n)] for name in cfg.rewards.weights}
    total = [sum(scores[i] for scores in rewards.values()) for i in range(n)]
    mean = sum(total) / n
    return {"stage": "grpo", "step": step, "prompt": "Mia has 7 apples and finds 5. How many?", "answer": "12",
            "completions": completions, "rewards": rewards, "total": total, "advantages": [t - mean for t in total]}


def save(folder: Path, step: int | None = None) -> None:
    """An adapter folder as the job's readers see it (PEFT's adapter_config.json: stage_done) and, for a
    checkpoint, the Trainer's trainer_state.json (the step a resume continues from). No weights."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ADAPTER_CONFIG).write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": "fake"}))
    if step is not None:
        (folder / TRAINER_STATE).write_text(json.dumps({"global_step": step}))


def rotate(checkpoints: Path, keep: int) -> None:
    """The Trainer's save_total_limit: only the newest `keep` checkpoints stay."""
    found = sorted(checkpoints.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    for old in found[:-keep] if keep else []:
        shutil.rmtree(old)


def stand_ins() -> dict[tuple[str, str], object]:
    """(module, attribute) -> the stand-in: everything of the job that loads, samples or trains a model."""
    stages = types.ModuleType("grpo_playground.training.stages")  # the real one imports TRL: never imported here
    stages.run_sft, stages.run_grpo = stage_runner("sft"), stage_runner("grpo")
    return {("sys.modules", "grpo_playground.training.stages"): stages,
            ("grpo_playground.training.backend", "load_policy"): load_policy,
            ("grpo_playground.training.budget", "cuda_available"): lambda: False,
            ("grpo_playground.training.preflight", "run_preflight"): run_preflight,
            ("grpo_playground.training.job", "_prepare_process"): lambda cfg: None,
            ("grpo_playground.training.job", "_free"): lambda policy: None}


def install(monkeypatch=None) -> None:
    """Put the stand-ins in place; through pytest's `monkeypatch`, undone after the test."""
    import importlib

    for (module, name), value in stand_ins().items():
        if module == "sys.modules":
            monkeypatch.setitem(sys.modules, name, value) if monkeypatch else sys.modules.__setitem__(name, value)
        else:
            (monkeypatch.setattr if monkeypatch else setattr)(importlib.import_module(module), name, value)


if __name__ == "__main__":
    install()
    from grpo_playground.cli.train import main

    sys.exit(main())
