"""The job's side of a run folder (layout in docs/ARCHITECTURE.md): status, log lines, JSONL streams, stop requests.

The UI reads these files while the job runs, so every write is either atomic (status.json) or one appended
line (the JSONL files). File names, paths and the status file come from grpo_playground.run_layout, which the UI reads with.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from grpo_playground import run_layout
from grpo_playground.contracts.metrics import encode_record, jsonable, read_records
from grpo_playground.contracts.process import write_json_atomic
from grpo_playground.contracts.layout import STOP_FILE
from grpo_playground.run_layout import read_status, write_status
from grpo_playground.training.multigpu import is_main_process
from grpo_playground.training.progress import say


class RunFolder:
    def __init__(self, path: str | Path):
        self.path = Path(path).resolve()
        self.path.mkdir(parents=True, exist_ok=True)
        self._sigterm = False
        # Under `accelerate launch` every process runs the job; only the main one writes the folder.
        self.writer = is_main_process()

    # --- paths -----------------------------------------------------------------------------------
    def checkpoints(self, stage: str) -> Path:
        return run_layout.checkpoints_dir(self.path, stage)

    def adapter(self, stage: str) -> Path:
        return run_layout.adapter_dir(self.path, stage)

    def last_checkpoint(self, stage: str) -> Path | None:
        folder = self.checkpoints(stage)
        found = [p for p in folder.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()] if folder.is_dir() else []
        return max(found, key=lambda p: int(p.name.split("-")[-1])) if found else None

    def stage_done(self, stage: str) -> bool:
        return run_layout.stage_done(self.path, stage)

    # --- status and streams ----------------------------------------------------------------------
    def status(self, **updates) -> dict:
        return write_status(self.path, **updates) if self.writer else self.read_status()

    def read_status(self) -> dict:
        return read_status(self.path)

    def log(self, message: str) -> None:
        """One line to stdout, which the job's supervisor appends to log.txt (the job's stdout is that file)."""
        if not self.writer:
            return
        say(f"[train] {time.strftime('%H:%M:%S')} {message}")  # above the terminal's progress bar, if any

    def append(self, name: str, record: dict) -> None:
        if not self.writer:
            return
        with open(self.path / name, "a", encoding="utf-8") as f:
            f.write(encode_record(record))

    def read_jsonl(self, name: str) -> list[dict]:
        return read_records(self.path / name)

    def write_json(self, name: str, value: dict) -> None:
        if not self.writer:
            return
        write_json_atomic(self.path / name, jsonable(value))

    # --- stop ------------------------------------------------------------------------------------
    def watch_sigterm(self) -> None:
        """SIGTERM only raises a flag: the trainer saves at the next step boundary (see StopAndProgress)."""
        def on_term(signum, frame):
            self._sigterm = True
            print("[train] SIGTERM: saving at the next step boundary, then stopping", file=sys.stderr, flush=True)

        signal.signal(signal.SIGTERM, on_term)

    def stop_requested(self) -> bool:
        return self._sigterm or (self.path / STOP_FILE).exists()
