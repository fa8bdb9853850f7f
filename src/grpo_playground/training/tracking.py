"""SwanLab for a run: offline into the run folder by default, online with SWANLAB_API_KEY, local or disabled.

transformers' report_to="swanlab" crashes with swanlab 0.10.3 ("No active Run"), so the job calls
swanlab.init itself and logs each metrics row (keys prefixed by stage) and the sample completions as
swanlab.Text. The env var SWANLAB_MODE, when set, wins over the recipe (tests set it to disabled).
"""

from __future__ import annotations

import os
from pathlib import Path


def resolve_mode(mode: str) -> str:
    env = os.environ.get("SWANLAB_MODE")
    if env:
        return env
    if mode == "auto":
        return "online" if os.environ.get("SWANLAB_API_KEY") else "offline"
    return mode


class Tracker:
    """A started SwanLab run, or a no-op when tracking is disabled or swanlab failed to start."""

    def __init__(self, project: str, name: str, mode: str, logdir: Path, config: dict, log):
        self.run = None
        self.mode = resolve_mode(mode)
        if self.mode == "disabled":
            return
        try:
            import swanlab

            self._swanlab = swanlab
            self.run = swanlab.init(project=project, experiment_name=name, config=config, mode=self.mode,
                                    logdir=str(logdir))
            log(f"swanlab {self.mode} run started (logdir {logdir}"
                + (f"; upload later with `swanlab sync {logdir}/run-*`)" if self.mode == "offline" else ")"))
        except Exception as exc:  # tracking must never kill training: say so and go on
            log(f"swanlab could not start in mode {self.mode} ({type(exc).__name__}: {exc}); continuing without it")
            self.run = None

    def log_metrics(self, row: dict) -> None:
        if self.run is None:
            return
        stage = row.get("stage", "train")
        data = {f"{stage}/{k}": float(v) for k, v in row.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("step", "max_steps", "time")}
        self._swanlab.log(data, step=int(row["step"]))

    def log_sample(self, sample: dict) -> None:
        if self.run is None:
            return
        texts = [self._swanlab.Text(c, caption=f"total {t:.2f} adv {a:+.2f}")
                 for c, t, a in zip(sample["completions"], sample["total"], sample["advantages"])]
        self._swanlab.log({f"{sample['stage']}/samples": texts}, step=int(sample["step"]))

    def finish(self) -> None:
        if self.run is not None:
            self._swanlab.finish()
            self.run = None
