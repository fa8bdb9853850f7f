"""`python -m pipelines.train` says how far it is: a progress bar with ETA on a terminal, plain lines with the
percentage and ETA when its output goes to a file or a pipe (the app's log.txt), never carriage returns there;
its --help says what each --stage does and lists every key --set takes.

A real SFT stage of 4 steps on the embedded tiny model, run twice: under a pseudo-terminal and piped.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios

import pytest

from test_train_cli import ROOT, SMALL, cli, env

SFT_ONLY = SMALL + ["sft.logging_steps=2"]


def read_terminal(command: list[str]) -> str:
    """The output of `command` run with a pseudo-terminal as its stdout and stderr."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))  # a terminal window's size
    proc = subprocess.Popen(command, cwd=ROOT, env=env(), stdin=subprocess.DEVNULL, stdout=follower, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=300) == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.slow  # two real (tiny) SFT stages
def test_a_terminal_gets_a_bar_with_eta_and_a_pipe_plain_lines(tmp_path):
    shown = read_terminal(cli("--stage", "sft", "--run-dir", str(tmp_path / "tty"), overrides=SFT_ONLY))
    # tqdm's bar: "sft: 100%|##########| 4/4 [00:05<00:00, 1.31s/step]", redrawn in place with carriage returns
    assert re.search(r"sft: +100%\|.*\| 4/4 \[\d\d:\d\d<00:00", shown), shown[-2000:]
    assert "\r" in shown
    assert re.search(r"\[train\] .* sft step 2/4 \(50% · ETA \d+m\d\ds\)", shown), shown[-2000:]  # lines above it

    piped = subprocess.run(cli("--stage", "sft", "--run-dir", str(tmp_path / "pipe"), overrides=SFT_ONLY), cwd=ROOT,
                           env=env(), capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0, piped.stderr[-3000:]
    assert "\r" not in piped.stdout + piped.stderr and "|" not in piped.stdout  # no bar in a log file
    assert re.search(r"sft step 2/4 \(50% · ETA \d+m\d\ds\)", piped.stdout), piped.stdout[-2000:]
    assert re.search(r"sft step 4/4 \(100% · ETA 0m00s\)", piped.stdout), piped.stdout[-2000:]


def test_help_says_what_each_stage_does_and_every_key_set_takes():
    from dataclasses import fields

    from grpo_playground.config import SECTIONS
    from grpo_playground.config.run_config import TRL_OPTIONS

    shown = subprocess.run([*cli()[:3], "--help"], cwd=ROOT, env=env(), capture_output=True, text=True, timeout=60)
    text = " ".join(shown.stdout.split())  # argparse wraps lines at the terminal's width
    assert shown.returncode == 0, shown.stderr
    assert "all: SFT, then the pre-flight, then GRPO" in text and "preflight: only sample a few groups" in text
    missing = [f"{section}.{f.name}" for section, cls in SECTIONS.items() for f in fields(cls)
               if f.name != TRL_OPTIONS and f"{section}.{f.name}" not in text]
    assert missing == [], missing
    assert "any other field of TRL's GRPOConfig by its name" in text  # the pass-through, not a key of its own


def test_the_eta_of_a_stage_a_time_budget_ends_is_what_is_left_of_the_budget():
    from grpo_playground.training.progress import eta_seconds

    # 40 steps in 300 s of a 10-minute budget, 10^6 steps asked for (the seed regime's arms): 300 s left, not 1700 h
    assert eta_seconds(40, 1_000_000, 0, started=1000.0, now=1300.0, budget_s=600) == 300.0
    # steps end it first: the pace's estimate (10 steps left at 7.5 s)
    assert eta_seconds(40, 50, 0, started=1000.0, now=1300.0, budget_s=600) == 75.0
    assert eta_seconds(0, 1_000_000, 0, started=1000.0, now=1010.0, budget_s=600) == 590.0  # before the pace is known
    assert eta_seconds(0, 100, 0, started=1000.0, now=1010.0) is None
    assert eta_seconds(40, 1_000_000, 0, started=1000.0, now=1700.0, budget_s=600) == 0.0  # the budget is spent
