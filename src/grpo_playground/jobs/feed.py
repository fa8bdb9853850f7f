"""Incremental readers of a run's files, so a 2 s poll reads only what the job appended since the last one.

A job may be caught mid-write: the last line without its newline is left for the next read. The state is
plain data (offsets and records), so one `RunFeed` per browser session lives in a gr.State.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from grpo_playground.contracts.metrics import decode_record
from grpo_playground.contracts.process import log_tail
from grpo_playground.contracts.layout import DOCTOR_FILE, LOG_FILE, METRICS_FILE, SAMPLES_FILE

MAX_READ_BYTES = 8 * 1024 * 1024  # per poll and file: a huge append is read over several polls
KEEP_SAMPLES = 20  # sample groups are large (G completions each); the tab shows the latest ones
FEEDS = {METRICS_FILE: "metrics", SAMPLES_FILE: "samples", DOCTOR_FILE: "findings"}  # file -> RunFeed attribute


@dataclass
class JsonlTail:
    path: Path
    offset: int = 0

    def read_new(self) -> tuple[list[dict], bool]:
        """(new records, reset): reset is True when the file shrank (rewritten), and records restart at 0."""
        try:
            size = os.path.getsize(self.path)
        except OSError:
            return [], False
        reset = size < self.offset
        if reset:
            self.offset = 0
        if size == self.offset:
            return [], reset
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read(min(size - self.offset, MAX_READ_BYTES))
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a partly written last line waits for the next poll
        self.offset += len(complete)
        records = []
        for line in complete.splitlines():
            if not line.strip():
                continue
            record = decode_record(line)
            if record is not None:  # None: not a record (a stray print); the rest is kept
                records.append(record)
        return records, reset


@dataclass
class RunFeed:
    """What the UI knows of one run: all metrics, recent sample groups, the doctor's findings."""

    run_dir: Path
    metrics: list[dict] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)
    findings: list[dict] = field(default_factory=list)
    tails: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir)
        for name in FEEDS:
            self.tails.setdefault(name, JsonlTail(self.run_dir / name))

    def poll(self) -> bool:
        """Read what was appended; True when anything changed."""
        changed = False
        for name, attr in FEEDS.items():
            records, reset = self.tails[name].read_new()
            if reset:
                setattr(self, attr, [])
            if records or reset:
                getattr(self, attr).extend(records)
                changed = True
        del self.samples[:-KEEP_SAMPLES]
        return changed


def read_log_tail(run_dir: Path, max_bytes: int = 12_000) -> str:
    """The end of log.txt, starting at a line boundary."""
    return log_tail(Path(run_dir) / LOG_FILE, max_bytes)
