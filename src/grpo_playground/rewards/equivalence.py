"""answer_equivalence: is the answer mathematically equal to the gold (math-verify: 1/2 = 0.5, LaTeX, \\boxed{})?

math-verify parses with sympy, which can run for minutes or eat memory on hostile input ("9^9^9^9"), and its
own timeouts use signals that fail outside the main thread (Gradio handlers and TRL both call rewards from
other threads). So verification runs in one long-lived child process (`python -m
grpo_playground.rewards.equivalence_worker`) with a memory cap, its timeouts off, fed one JSON line per question;
the parent waits at most VERIFY_TIMEOUT_S and kills and restarts the child past that. The text sent is
capped too, so the bound holds for any input.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
from pathlib import Path

from grpo_playground.rewards.patterns import patterns_for
from grpo_playground.rewards.seed import Judgement, Reward, fmt
from grpo_playground.tags import DEFAULT_TAGS, Tags

VERIFY_TIMEOUT_S = 2.0
STARTUP_TIMEOUT_S = 60.0  # importing sympy + antlr on a busy 2-core machine
MAX_VERIFY_CHARS = 2_000

EQUIVALENT, NOT_EQUIVALENT, NO_ANSWER = 5.0, -2.5, -3.0


class EquivalenceWorker:
    """The child process and its pipe; one question at a time (a lock), restarted after a timeout or crash."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        src = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
        proc = subprocess.Popen(
            [sys.executable, "-m", "grpo_playground.rewards.equivalence_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
        )
        if self._readline(proc, STARTUP_TIMEOUT_S) != {"ready": True}:
            proc.kill()
            proc.wait()
            raise RuntimeError("the math-verify worker did not start: is math-verify installed (requirements.txt)?")
        return proc

    @staticmethod
    def _readline(proc: subprocess.Popen, timeout: float) -> dict | None:
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = proc.stdout.readline()
        return json.loads(line) if line else None

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def verify(self, gold: str, pred: str) -> dict:
        """{"equivalent": bool, "parsed": str} or {"error": str}; a timeout kills the child."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
            request = json.dumps({"gold": gold[:MAX_VERIFY_CHARS], "pred": pred[-MAX_VERIFY_CHARS:]})
            try:
                self._proc.stdin.write(request.encode() + b"\n")
                self._proc.stdin.flush()
                reply = self._readline(self._proc, VERIFY_TIMEOUT_S)
            except (BrokenPipeError, ValueError):
                reply = None
            if reply is None:
                self._stop()
                return {"error": f"math-verify took over {VERIFY_TIMEOUT_S:g} s (or crashed) and was stopped"}
            return reply

    def close(self) -> None:
        with self._lock:
            self._stop()


_worker = EquivalenceWorker()
atexit.register(_worker.close)


class AnswerEquivalence(Reward):
    """5.0 if math-verify finds the answer equal to the gold, -2.5 if not, -3.0 if no answer could be read
    (below any wrong answer, so not answering never pays). The answer is the strict match's capture when
    the format is right, else math-verify's own extraction from the completion's end (e.g. `\\boxed{}`)."""

    name = "answer_equivalence"

    def judge(self, text: str, answer: str) -> Judgement:
        found = patterns_for(self.tags).strict_search(text)
        pred = found.match.group(1) if found.match is not None else text
        if not pred.strip():
            return Judgement(NO_ANSWER, f"empty completion: {fmt(NO_ANSWER)}")
        reply = _worker.verify(answer, pred)
        if "error" in reply:
            return Judgement(NO_ANSWER, f"{reply['error']}: {fmt(NO_ANSWER)}")
        where = "between the solution tags" if found.match is not None else "in the text (no strict match)"
        if reply.get("no_answer"):
            return Judgement(NO_ANSWER, f"math-verify found no answer {where}: {fmt(NO_ANSWER)}")
        if reply["equivalent"]:
            return Judgement(EQUIVALENT, f"math-verify: {reply['parsed']!r} {where} equals {answer!r}: {fmt(EQUIVALENT)}")
        return Judgement(
            NOT_EQUIVALENT, f"math-verify: {reply['parsed']!r} {where} differs from {answer!r}: {fmt(NOT_EQUIVALENT)}"
        )


def get_answer_equivalence_reward(tags: Tags = DEFAULT_TAGS) -> AnswerEquivalence:
    return AnswerEquivalence(tags)
answer_equivalence = get_answer_equivalence_reward()
