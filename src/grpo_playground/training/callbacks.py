"""What the job writes while a trainer runs: metrics, samples, doctor findings, progress, stop handling.

`RunCallback` is a transformers TrainerCallback (SFT and GRPO alike). `SampleRecorder` wraps the GRPO reward
functions so the callback can write, at each logging step, one group's completions with each reward's score,
the weighted total and the advantages (TRL 1.14.2 only writes those to wandb/trackio or a parquet file that
appears after the callbacks ran).
"""

from __future__ import annotations

import math
import time

from transformers import TrainerCallback

from grpo_playground.rewards import one_group_scale
from grpo_playground.rewards.patterns import completion_text
from grpo_playground.contracts.layout import DOCTOR_FILE, METRICS_FILE, SAMPLES_FILE
from grpo_playground.step_timing import StepTimer
from grpo_playground.contracts.findings import Finding
from grpo_playground.contracts.metrics import HEADLINE_KEYS, NAN_STOPS_JOB
from grpo_playground.doctor import critical_finding, diagnose
from grpo_playground.training.multigpu import any_process
from grpo_playground.training.progress import eta_seconds, step_note
from grpo_playground.training.run_folder import RunFolder
from grpo_playground.training.save_clock import SaveClock



class NaNError(RuntimeError):
    """Loss or gradient norm became NaN/inf: the job stops and the doctor names the knob."""


class SampleRecorder:
    """Wraps reward functions; remembers the last scored batch (TRL calls each function once per batch)."""

    def __init__(self, funcs, weights, num_generations: int, scale: str):
        self.weights = dict(zip((f.__name__ for f in funcs), weights))
        self.num_generations = num_generations
        self.scale = one_group_scale(scale)
        self.batch: dict = {}
        self.scores: dict[str, list[float]] = {}
        self.funcs = [self._wrap(f) for f in funcs]

    def _wrap(self, fn):
        recorder = self

        def recorded(prompts, completions, **kwargs):
            scores = fn(prompts=prompts, completions=completions, **kwargs)
            if fn.__name__ == next(iter(recorder.weights)):
                recorder.batch = {"prompts": prompts, "completions": completions, "kwargs": kwargs}
                recorder.scores = {}
            recorder.scores[fn.__name__] = [float("nan") if s is None else float(s) for s in scores]
            return scores

        recorded.__name__ = fn.__name__
        return recorded

    def sample(self, stage: str, step: int) -> dict | None:
        """The first group of the last batch, as one samples.jsonl record."""
        from grpo_playground.rewards import group_advantages

        if not self.batch or len(self.scores) < len(self.weights):
            return None
        g = self.num_generations
        kwargs = self.batch["kwargs"]
        completions = [completion_text(c) for c in self.batch["completions"][:g]]
        rewards = {name: s[:g] for name, s in self.scores.items()}
        total = [sum(w * rewards[n][i] for n, w in self.weights.items() if not math.isnan(rewards[n][i]))
                 for i in range(len(completions))]
        _, _, advantages = group_advantages(total, self.scale)
        problem = kwargs.get("problem", [None])[0]
        return {"stage": stage, "step": step, "prompt": problem or completion_text(self.batch["prompts"][0]),
                "answer": kwargs.get("answer", [""])[0], "completions": completions, "rewards": rewards,
                "total": total, "advantages": advantages}


class RunCallback(TrainerCallback):
    """Writes the run folder while a trainer runs. Every step gets its `timing/*` keys in metrics.jsonl: merged into
    the step's logged row on a logging step, as a row of their own otherwise."""

    def __init__(self, folder: RunFolder, stage: str, tracker, history: list[dict], recorder: SampleRecorder | None,
                 max_minutes: float | None = None, timer: StepTimer | None = None, critical_steps: int | None = None,
                 save_minutes: float | None = None):
        self.folder, self.stage, self.tracker, self.history, self.recorder = folder, stage, tracker, history, recorder
        self.max_minutes = max_minutes
        self.save_clock = SaveClock(save_minutes)
        self.timer = timer or StepTimer()
        self.pending_timing: dict = {}  # this step's timing, waiting for the step's logged row
        self._optimizer_phase = None
        self.reported = {(f["stage"], f["rule"]) for f in folder.read_jsonl(DOCTOR_FILE)}
        self.started = time.time()
        self.first_step = 0
        self.stopped_by = ""  # "stop": a stop was requested; "time": the time budget ran out; "doctor": a critical
        self.critical_steps = critical_steps  # doctor.critical_steps when doctor.stop_on_critical, else None
        self.first_row = len(history)  # a resumed stage's critical window starts with its own rows

    def on_train_begin(self, args, state, control, **kwargs):
        self.started, self.first_step = time.time(), state.global_step
        self.save_clock.start(self.started)
        self.folder.status(state="running", stage=self.stage, step=state.global_step, max_steps=state.max_steps)

    def on_step_begin(self, args, state, control, **kwargs):
        self.timer.begin_step()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self._optimizer_phase = self.timer.phase("optimizer")
        self._optimizer_phase.__enter__()

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self._optimizer_phase is not None:
            self._optimizer_phase.__exit__(None, None, None)
            self._optimizer_phase = None

    def _eta(self, state) -> float | None:
        return eta_seconds(state.global_step, state.max_steps, self.first_step, self.started,
                           budget_s=self.max_minutes * 60 if self.max_minutes else None)

    def on_step_end(self, args, state, control, **kwargs):
        started = time.perf_counter()
        self._record_timing(state, control.should_log)
        self.folder.status(step=state.global_step, max_steps=state.max_steps, eta_s=self._eta(state))
        if self.folder.stop_requested():
            self.stopped_by = "stop"
        elif self.max_minutes and time.time() - self.started >= self.max_minutes * 60:
            self.stopped_by = "time"
        if self._any_process(args, bool(self.stopped_by)) and not self.stopped_by:
            self.stopped_by = "stop"  # another GPU's process saw the request: stop at the same step, together
        if self.stopped_by and state.max_steps and state.global_step >= state.max_steps:
            self.stopped_by = ""  # asked at the last step: the stage ends as finished (a resume would run past it)
        now = time.time()
        if self.save_clock.period_s and self._any_process(args, self.save_clock.due(now)):
            self.save_clock.saving(now)
            control.should_save = True  # save_minutes: the Trainer saves checkpoint-<step> right after this callback
        if self.stopped_by:
            # Trainer saves a checkpoint right after this callback when should_save is set, then leaves its loop.
            control.should_save = True
            control.should_training_stop = True
        self.timer.add_callbacks(time.perf_counter() - started)
        return control

    @staticmethod
    def _any_process(args, flag: bool) -> bool:
        """`flag` on any GPU's process: every process saves or stops at the same step (their clocks differ)."""
        return any_process(flag) if args.world_size > 1 else flag

    def _record_timing(self, state, will_log: bool) -> None:
        self._flush_timing()  # an earlier step's timing whose logged row never came
        timing = self.timer.end_step()
        if not timing:
            return
        import torch

        if torch.cuda.is_available():
            timing["gpu/peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
        self.pending_timing = {"stage": self.stage, "step": state.global_step, "max_steps": state.max_steps,
                               "time": time.time(), **timing}
        if not will_log:
            self._flush_timing()

    def _flush_timing(self) -> None:
        if self.pending_timing:
            self.folder.append(METRICS_FILE, self.pending_timing)
            self.tracker.log_metrics(self.pending_timing)
            self.pending_timing = {}

    def on_train_end(self, args, state, control, **kwargs):
        self._flush_timing()

    def on_log(self, args, state, control, logs=None, **kwargs):
        started = time.perf_counter()
        try:
            self._log(state, control, dict(logs or {}))
        finally:
            self.timer.add_callbacks(time.perf_counter() - started)

    def _log(self, state, control, logs: dict) -> None:
        if "train_runtime" in logs:  # Trainer's end-of-stage summary, not a logging step
            self.folder.log(f"{self.stage} summary: " + ", ".join(f"{k}={_short(v)}" for k, v in logs.items()))
            return
        row = {"stage": self.stage, "step": state.global_step, "max_steps": state.max_steps, "time": time.time(), **logs}
        if self.pending_timing.get("step") == state.global_step:
            row.update({k: v for k, v in self.pending_timing.items() if k not in row})
            self.pending_timing = {}
        self.folder.append(METRICS_FILE, row)
        self.history.append(row)
        self.tracker.log_metrics(row)
        shown = " ".join(f"{k.split('/')[-1] if '/' in k else k}={_short(logs[k])}" for k in HEADLINE_KEYS if k in logs)
        note = step_note(state.global_step, state.max_steps, self._eta(state))
        self.folder.log(f"{self.stage} step {state.global_step}/{state.max_steps} ({note}) {shown}")
        if self.recorder is not None:
            sample = self.recorder.sample(self.stage, state.global_step)
            if sample:
                self.folder.append(SAMPLES_FILE, sample)
                self.tracker.log_sample(sample)
        for finding in self.new_findings():
            self.folder.append(DOCTOR_FILE, finding.to_dict())
            self.folder.log(f"doctor [{finding.severity}] {finding.rule} at step {finding.step}: {finding.message}. "
                            f"Try: {finding.knob}")
        if self.critical_steps and self._stop_if_critical(state, control):
            return
        bad = [k for k in NAN_STOPS_JOB if isinstance(logs.get(k), float) and not math.isfinite(logs[k])]
        if bad:
            raise NaNError(f"{' and '.join(bad)} became NaN at {self.stage} step {state.global_step}")

    def _stop_if_critical(self, state, control) -> bool:
        """doctor.stop_on_critical: stop the stage with a checkpoint when the doctor's critical rules fire, and write
        which step to resume from and which setting to turn (status.json's reason, log.txt, doctor.jsonl)."""
        rows = [r for r in self.history[self.first_row:] if r.get("stage") == self.stage]
        finding = critical_finding(rows, self.critical_steps, self.stage)
        step = state.global_step
        if finding is None or (finding.rule != "nan" and state.max_steps and step >= state.max_steps):
            return False  # nothing critical, or the stage ends here anyway with its adapter
        if finding.rule == "nan":
            # this step's update may already have written NaN into the weights: keep the last checkpoint before it
            control.should_save = False
            last = self.folder.last_checkpoint(self.stage)
            resume_step = int(last.name.split("-")[-1]) if last else 0
            where = (f"resume from {last.name} (step {resume_step}), the last checkpoint before the NaN" if last else
                     "no checkpoint was saved before the NaN: start the stage again")
        else:
            control.should_save = True  # Trainer saves right after this callback, then leaves its loop
            resume_step = step
            where = f"resume from checkpoint-{step}, saved now"
        control.should_training_stop = True
        self.stopped_by = "doctor"
        reason = (f"Stopped by the doctor at {self.stage} step {step}: {finding.message}. Turn: {finding.knob}. Then "
                  f"{where}: Resume in the Training tab, or grpo-playground train RECIPE --run-dir RUN --resume "
                  "--set SECTION.KEY=VALUE.")
        self.folder.append(DOCTOR_FILE, {**finding.to_dict(), "stopped": True, "resume_step": resume_step})
        self.folder.status(reason=reason)
        self.folder.log(reason)
        return True

    def new_findings(self) -> list[Finding]:
        fresh = [f for f in diagnose(self.history) if (f.stage, f.rule) not in self.reported]
        self.reported.update((f.stage, f.rule) for f in fresh)
        return fresh


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
