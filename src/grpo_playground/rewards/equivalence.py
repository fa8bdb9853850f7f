"""answer_equivalence: is the answer mathematically equal to the gold (math-verify: 1/2 = 0.5, LaTeX, \\boxed{})?

math-verify parses with sympy, which can run for minutes or eat memory on hostile input ("9^9^9^9"), and its
own timeouts use signals that fail outside the main thread (Gradio handlers and TRL both call rewards from
other threads). So verification runs in long-lived child processes (`python -m
grpo_playground.rewards.equivalence_worker`) with a memory cap, their timeouts off, fed one JSON line per
question; the parent waits at most VERIFY_TIMEOUT_S and kills the answering process past that (a warm copy,
forked from a parent that imported sympy once, takes over in milliseconds). The text sent is capped too, so the
bound holds for any input.

One user must not stall the others: POOL_SIZE children serve questions in parallel, and a request (a sandbox
/score call) runs inside `request_deadline(REQUEST_BUDGET_S)`: once its budget is spent, its remaining
completions are judged without math-verify at once, so a group of power towers holds a child for at most
that long, not 64 x 2 s.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time

from grpo_playground.child_process import env_without_secrets, python_child_env
from grpo_playground.rewards.patterns import patterns_for
from grpo_playground.rewards.seed import Judgement, Reward, fmt
from grpo_playground.tags import DEFAULT_TAGS, Tags

VERIFY_TIMEOUT_S = 2.0
STARTUP_TIMEOUT_S = 60.0  # importing sympy + antlr on a busy 2-core machine
RESPAWN_TIMEOUT_S = 10.0  # forking a warm answerer: milliseconds, seconds on a machine under heavy load
MAX_VERIFY_CHARS = 2_000
POOL_SIZE = 2  # children (~150 MB each): two cores, and one hostile question never blocks every checker
REQUEST_BUDGET_S = 3.0  # math-verify time one sandbox request may use, all its completions together

EQUIVALENT, NOT_EQUIVALENT, NO_ANSWER = 5.0, -2.5, -3.0


class EquivalenceWorker:
    """The child process and its pipe; one question at a time (a lock). A question past its deadline costs
    only the forked answering process (equivalence_worker.py): a warm copy replaces it in milliseconds."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._answerer: int | None = None  # pid of the forked process that answers
        self._lock = threading.Lock()

    def _start(self) -> None:
        env = python_child_env(env_without_secrets())
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "grpo_playground.rewards.equivalence_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
        )
        if not self._await_answerer(STARTUP_TIMEOUT_S):
            self._stop()
            raise RuntimeError("the math-verify worker did not start: is math-verify installed (requirements.txt)?")

    def _await_answerer(self, timeout: float) -> bool:
        reply = self._readline(self._proc, timeout)
        self._answerer = reply.get("pid") if reply and reply.get("ready") else None
        return self._answerer is not None

    @staticmethod
    def _readline(proc: subprocess.Popen, timeout: float) -> dict | None:
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = proc.stdout.readline()
        try:
            return json.loads(line) if line else None
        except ValueError:
            return None

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()  # its answering process dies with it (PR_SET_PDEATHSIG)
            self._proc.wait()
            for pipe in (self._proc.stdin, self._proc.stdout):
                with contextlib.suppress(OSError):
                    pipe.close()
            self._proc, self._answerer = None, None

    def _replace_answerer(self) -> None:
        """Kill the answering process stuck on a question; the parent forks a warm one at once."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._answerer, signal.SIGKILL)
        if not self._await_answerer(RESPAWN_TIMEOUT_S):
            self._stop()

    def verify(self, gold: str, pred: str, timeout: float = VERIFY_TIMEOUT_S) -> dict:
        """{"equivalent": bool, "parsed": str} or {"error": str}; past `timeout` the answerer is replaced."""
        with self._lock:
            if not self.ready():
                self._stop()
                self._start()
            request = json.dumps({"gold": gold[:MAX_VERIFY_CHARS], "pred": pred[-MAX_VERIFY_CHARS:]})
            try:
                self._proc.stdin.write(request.encode() + b"\n")
                self._proc.stdin.flush()
                reply = self._readline(self._proc, timeout)
            except (BrokenPipeError, ValueError):
                reply = None
            if reply is None:
                self._replace_answerer()
                return {"error": f"math-verify took over {timeout:g} s (or crashed) and was stopped"}
            return reply

    def ready(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and self._answerer is not None

    def warm_up(self) -> None:
        with self._lock:
            if not self.ready():
                self._stop()
                self._start()

    def close(self) -> None:
        with self._lock:
            self._stop()


class EquivalencePool:
    """POOL_SIZE workers handed out one question at a time, first come first served. A worker whose process
    died (a crash, not a timeout) restarts in the background before it is handed out again, so no caller
    pays a stranger's sympy import."""

    def __init__(self, size: int = POOL_SIZE) -> None:
        self._workers = [EquivalenceWorker() for _ in range(size)]
        self._idle: queue.Queue[EquivalenceWorker] = queue.Queue()
        for worker in self._workers:
            self._idle.put(worker)
        self._local = threading.local()

    def verify(self, gold: str, pred: str) -> dict:
        deadline = getattr(self._local, "deadline", None)
        timeout = VERIFY_TIMEOUT_S if deadline is None else min(VERIFY_TIMEOUT_S, deadline - time.monotonic())
        if timeout <= 0:
            return {"error": f"skipped: this request used its {REQUEST_BUDGET_S:g} s of math-verify time"}
        try:
            worker = self._idle.get(timeout=deadline - time.monotonic() if deadline is not None else STARTUP_TIMEOUT_S)
        except queue.Empty:
            return {"error": "skipped: every math-verify checker stayed busy for this request's whole budget"}
        try:
            if deadline is not None:  # what waiting for a checker left of the budget
                timeout = min(timeout, deadline - time.monotonic())
                if timeout <= 0:
                    return {"error": f"skipped: this request used its {REQUEST_BUDGET_S:g} s of math-verify time"}
            return worker.verify(gold, pred, timeout)
        finally:
            self._release(worker)

    def _release(self, worker: EquivalenceWorker) -> None:
        if worker.ready():
            self._idle.put(worker)
            return

        def restart():
            with contextlib.suppress(RuntimeError):
                worker.warm_up()
            self._idle.put(worker)  # even a failed start goes back: its next use reports the failure

        threading.Thread(target=restart, daemon=True).start()

    @contextlib.contextmanager
    def request_deadline(self, seconds: float = REQUEST_BUDGET_S):
        """Within this block (this thread), math-verify questions share one budget of `seconds`."""
        previous = getattr(self._local, "deadline", None)
        self._local.deadline = time.monotonic() + seconds
        try:
            yield
        finally:
            self._local.deadline = previous

    def close(self) -> None:
        for worker in self._workers:
            worker.close()


_pool = EquivalencePool()
atexit.register(_pool.close)
request_deadline = _pool.request_deadline


class AnswerEquivalence(Reward):
    """5.0 if math-verify finds the answer equal to the gold, -2.5 if not, -3.0 if no answer could be read
    (below any wrong answer, so not answering never pays). The answer is the strict match's capture when
    the format is right, else math-verify's own extraction from the completion's end (e.g. `\\boxed{}`)."""

    name = "answer_equivalence"

    def judge(self, text: str, answer: str) -> Judgement:
        found = patterns_for(self.tags).strict_search(text)
        pred = found.text if found is not None else text
        if not pred.strip():
            return Judgement(NO_ANSWER, f"empty completion: {fmt(NO_ANSWER)}")
        reply = _pool.verify(answer, pred)
        if "error" in reply:
            return Judgement(NO_ANSWER, f"{reply['error']}: {fmt(NO_ANSWER)}")
        where = "between the solution tags" if found is not None else "in the text (no strict match)"
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
