"""TRL's metric keys (as its trainers log them, verbatim) and the one JSONL codec of the run folder's streams.

JSON has no NaN or infinity, but the doctor must see them (a loss that became NaN is its first rule): the job
writes a non-finite float as the string "nan", "inf" or "-inf", and every reader turns a top-level value of those
back into a float with `decode_record`, so the job and the UI see the same numbers.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

# --- keys TRL logs (SFT and GRPO; docs: TRL's GRPOTrainer "Logged metrics") ------------------------------------
LOSS = "loss"
GRAD_NORM = "grad_norm"
LEARNING_RATE = "learning_rate"
REWARD = "reward"
REWARD_STD = "reward_std"
FRAC_REWARD_ZERO_STD = "frac_reward_zero_std"
KL = "kl"  # only with beta > 0
COMPLETION_MEAN_LENGTH = "completions/mean_length"
COMPLETION_MAX_LENGTH = "completions/max_length"
CLIPPED_RATIO = "completions/clipped_ratio"
TRAIN_RUNTIME = "train_runtime"  # only in the Trainer's end-of-training summary row
PER_REWARD_MEAN_RE = re.compile(r"^rewards/(.+)/mean$")

# the keys a user compares runs by (the UI's history chart) and the job prints on each logging line
HEADLINE_KEYS = (REWARD, REWARD_STD, LOSS, KL, COMPLETION_MEAN_LENGTH, CLIPPED_RATIO, FRAC_REWARD_ZERO_STD,
                 LEARNING_RATE, GRAD_NORM)
NAN_STOPS_JOB = (LOSS, GRAD_NORM)  # non-finite: the update blew up, the job stops
NAN_WATCHED = (*NAN_STOPS_JOB, REWARD, KL)  # non-finite: the doctor's NaN rule fires


def reward_mean_key(name: str) -> str:
    """TRL's key of one reward function's mean (the function's __name__)."""
    return f"rewards/{name}/mean"


# --- the JSONL codec ------------------------------------------------------------------------------------------
NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def jsonable(value):
    """`value` with every non-finite float (at any depth) as its string, so json.dumps writes strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def encode_record(record: dict) -> str:
    """One JSONL line (with its newline) of a record."""
    return json.dumps(jsonable(record), ensure_ascii=False) + "\n"


def decode_record(line: str | bytes) -> dict | None:
    """The record of one JSONL line, its top-level "nan"/"inf"/"-inf" strings read back as floats; None for a
    line that is not a JSON object (a line cut by a kill, a stray print)."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    return {k: NON_FINITE.get(v, v) if isinstance(v, str) else v for k, v in value.items()}


def read_records(path: str | Path) -> list[dict]:
    """Every record of a JSONL file through decode_record ([] when it is missing); a line that is not a record (cut
    by a kill) is skipped and the rest kept. A live file is followed with jobs.feed.JsonlTail instead."""
    try:
        lines = Path(path).read_bytes().splitlines()
    except FileNotFoundError:
        return []
    return [row for row in map(decode_record, lines) if row is not None]
