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
completions are not sent to math-verify, so a group of power towers holds a child for at most that long, not
64 x 2 s. The children are handed out fairly per visitor (`VISITOR`, set by the app's handlers): a visitor holds
at most MAX_CHECKERS_PER_VISITOR at once, and a freed child goes to the waiting visitor who used the least checker
time lately, so one visitor's many requests cannot queue in front of another's.

A question math-verify did not answer (its time ran out, or no child was free within the request's budget) is
not a verdict on the answer: the sandbox and the chat show it as "could not score" (UNSCORED, a NaN), never as
the -3.0 of an unreadable answer (issue 38: 7 correct answers in 46 read -3.0 under load).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import contextvars
import json
import math
import os
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
MAX_CHECKERS_PER_VISITOR = 1  # of POOL_SIZE: one visitor's power towers leave the other child to everyone else
USAGE_HALF_LIFE_S = 10.0  # a visitor's checker time counts against their turn, halving every 10 s
MAX_VISITORS_TRACKED = 4_096
# Whom the current question counts against (request_limits.visitor_of_request); the app's handlers set it.
VISITOR: contextvars.ContextVar[str] = contextvars.ContextVar("checker_visitor", default="this process")
UNSCORED = math.nan  # the score of a question math-verify did not answer: no verdict, shown as "could not score"

EQUIVALENT, NOT_EQUIVALENT, NO_ANSWER = 5.0, -2.5, -3.0


class EquivalenceWorker:
    """The child process and its pipe; one question at a time (a lock). A question past its deadline costs
    only the forked answering process (equivalence_worker.py): a warm copy replaces it in milliseconds.

    Each question carries an id and its deadline: an answerer killed before it read its question leaves that
    question in the pipe for its successor, which skips it once its deadline has passed, and a late answer to an
    earlier question is told apart by its id (without ids, every answer after such a kill was the one before's:
    the tower that timed out at 2 s read 5.0, and the honest answers behind it each read their neighbour's verdict)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._answerer: int | None = None  # pid of the forked process that answers
        self._lock = threading.Lock()
        self._asked = 0  # the id of the last question sent
        self._unread = b""  # what the pipe gave past the last full line

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
        """Wait for the answering process's announcement; late answers to earlier questions before it are dropped."""
        reply = self._next_reply(time.monotonic() + timeout, lambda reply: reply.get("ready"))
        self._answerer = reply.get("pid") if reply else None
        return self._answerer is not None

    def _next_reply(self, end: float, wanted) -> dict | None:
        """The next line `wanted` accepts, by time.monotonic() `end`; the lines before it are dropped."""
        reply = self._readline(end)
        while reply is not None and not wanted(reply):
            reply = self._readline(end)
        return reply

    def _readline(self, end: float) -> dict | None:
        """The next JSON line by time.monotonic() `end`; None past it, at end of output, or for a line that is not
        JSON. Reads the pipe's bytes itself: a buffered readline could hold a second line where select cannot see it."""
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._unread:
            ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                return None
            self._unread += chunk
        line, self._unread = self._unread.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except ValueError:
            return None
        return reply if isinstance(reply, dict) else None

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()  # its answering process dies with it (PR_SET_PDEATHSIG)
            self._proc.wait()
            for pipe in (self._proc.stdin, self._proc.stdout):
                with contextlib.suppress(OSError):
                    pipe.close()
            self._proc, self._answerer, self._unread = None, None, b""

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
            self._asked += 1
            request = json.dumps({"id": self._asked, "until": time.time() + timeout,
                                  "gold": gold[:MAX_VERIFY_CHARS], "pred": pred[-MAX_VERIFY_CHARS:]})
            end = time.monotonic() + timeout
            try:
                self._proc.stdin.write(request.encode() + b"\n")
                self._proc.stdin.flush()
                # dropped before it: late answers to earlier questions
                reply = self._next_reply(end, lambda reply: reply.get("id") == self._asked)
            except (BrokenPipeError, ValueError):
                reply = None
            if reply is None:
                self._replace_answerer()
                return {"error": f"math-verify took over {timeout:g} s (or crashed) and was stopped", "unscored": True}
            reply.pop("id")
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
    """POOL_SIZE workers, handed out one question at a time and fairly per visitor: a visitor holds at most
    MAX_CHECKERS_PER_VISITOR, and a free worker goes to the waiting visitor who used the least checker time lately
    (USAGE_HALF_LIFE_S), so a group of power towers (2 s a question) yields to a group of honest answers (~50 ms).
    Within a request (`request_deadline`) a worker stays with the request between its questions unless someone who
    used less is waiting: an honest group of 8 does not queue 8 times behind the towers. A worker whose process
    died (a crash, not a timeout) restarts in the background before it is handed out again, so no caller pays a
    stranger's sympy import."""

    def __init__(self, size: int = POOL_SIZE) -> None:
        self._workers = [EquivalenceWorker() for _ in range(size)]
        self._idle = list(self._workers)
        self._changed = threading.Condition()
        self._waiting: list[tuple[str, object]] = []  # (visitor, ticket) in arrival order
        self._held: collections.Counter[str] = collections.Counter()
        self._usage: dict[str, tuple[float, float]] = {}  # visitor -> (checker seconds, as of time.monotonic())
        self._local = threading.local()  # this thread's request: its deadline and the worker it keeps

    def verify(self, gold: str, pred: str) -> dict:
        """The worker's reply; {"error", "unscored": True} when no checker answered within the request's budget."""
        deadline = getattr(self._local, "deadline", None)
        spent = {"error": f"skipped: this request used its {REQUEST_BUDGET_S:g} s of math-verify time",
                 "unscored": True}
        timeout = VERIFY_TIMEOUT_S if deadline is None else min(VERIFY_TIMEOUT_S, deadline - time.monotonic())
        if timeout <= 0:
            return spent
        visitor = VISITOR.get()
        kept = getattr(self._local, "kept", None)
        self._local.kept = None
        wait = deadline - time.monotonic() if deadline is not None else STARTUP_TIMEOUT_S
        worker = kept or self._acquire(visitor, wait)
        if worker is None:
            return {"error": "skipped: every math-verify checker stayed busy for this request's whole budget",
                    "unscored": True}
        start = time.monotonic()
        try:
            if deadline is not None:  # what waiting for a checker left of the budget
                timeout = min(timeout, deadline - start)
                if timeout <= 0:
                    return spent
            return worker.verify(gold, pred, timeout)
        finally:
            self._release(visitor, worker, time.monotonic() - start, keep=deadline is not None)

    def _used(self, visitor: str, now: float) -> float:
        used, when = self._usage.get(visitor, (0.0, now))
        return used * 0.5 ** ((now - when) / USAGE_HALF_LIFE_S)

    def _next_ticket(self) -> object | None:
        """The ticket served next: the first waiter of the visitor who used the least checker time lately, among
        those under their share (min keeps arrival order between equals)."""
        now = time.monotonic()
        eligible = [w for w in self._waiting if self._held[w[0]] < MAX_CHECKERS_PER_VISITOR]
        return min(eligible, key=lambda w: self._used(w[0], now))[1] if eligible else None

    def _acquire(self, visitor: str, timeout: float) -> EquivalenceWorker | None:
        end = time.monotonic() + timeout
        entry = (visitor, object())
        with self._changed:
            self._waiting.append(entry)
            try:
                while not (self._idle and self._next_ticket() is entry[1]):
                    if not self._changed.wait(end - time.monotonic()) and time.monotonic() >= end:
                        return None
                self._held[visitor] += 1
                return self._idle.pop()
            finally:
                self._waiting.remove(entry)
                self._changed.notify_all()

    def _release(self, visitor: str, worker: EquivalenceWorker, seconds: float, keep: bool = False) -> None:
        """Charge `seconds` to the visitor; the request keeps the worker for its next question (`keep`) unless a
        visitor who used less is waiting for one."""
        with self._changed:
            now = time.monotonic()
            used = self._used(visitor, now) + seconds
            self._usage[visitor] = (used, now)
            if len(self._usage) > MAX_VISITORS_TRACKED:  # forget those whose use has faded
                self._usage = {v: u for v, u in self._usage.items() if self._used(v, now) > 0.01 or self._held[v]}
            others = [w[0] for w in self._waiting if w[0] != visitor and self._held[w[0]] < MAX_CHECKERS_PER_VISITOR]
            if keep and worker.ready() and not any(self._used(v, now) < used for v in others):
                self._local.kept = worker
                return
            self._held[visitor] -= 1
            if not self._held[visitor]:
                del self._held[visitor]
        if worker.ready():
            self._put_back(worker)
            return

        def restart():
            with contextlib.suppress(RuntimeError):
                worker.warm_up()
            self._put_back(worker)  # even a failed start goes back: its next use reports the failure

        threading.Thread(target=restart, daemon=True).start()

    def _put_back(self, worker: EquivalenceWorker) -> None:
        with self._changed:
            self._idle.append(worker)
            self._changed.notify_all()

    @contextlib.contextmanager
    def request_deadline(self, seconds: float = REQUEST_BUDGET_S):
        """Within this block (this thread), math-verify questions share one budget of `seconds`; the worker the
        request kept goes back at its end."""
        previous, kept = getattr(self._local, "deadline", None), getattr(self._local, "kept", None)
        self._local.deadline, self._local.kept = time.monotonic() + seconds, None
        try:
            yield
        finally:
            if self._local.kept is not None:
                self._release(VISITOR.get(), self._local.kept, 0.0)
            self._local.deadline, self._local.kept = previous, kept

    def close(self) -> None:
        for worker in self._workers:
            worker.close()


_pool = EquivalencePool()
atexit.register(_pool.close)
request_deadline = _pool.request_deadline


class AnswerEquivalence(Reward):
    """5.0 if math-verify finds the answer equal to the gold, -2.5 if not, -3.0 if no answer could be read
    (below any wrong answer, so not answering never pays). The answer is the strict match's capture when
    the format is right, else math-verify's own extraction from the completion's end (e.g. `\\boxed{}`).
    A question no checker answered within the request's budget is judged UNSCORED ("could not score")."""

    name = "answer_equivalence"

    def __call__(self, prompts=None, completions=(), answer="", **kwargs) -> list[float]:
        """TRL's path: in a training job no stranger shares the checkers, so a completion math-verify could not
        finish within VERIFY_TIMEOUT_S is the completion's own doing and scores as unreadable (-3.0); as "no
        score" (TRL's None) a model could escape the wrong-answer penalty by writing what sympy chokes on."""
        return [NO_ANSWER if math.isnan(score) else score for score in super().__call__(prompts, completions, answer)]

    def judge(self, text: str, answer: str) -> Judgement:
        found = patterns_for(self.tags).strict_search(text)
        pred = found.text if found is not None else text
        if not pred.strip():
            return Judgement(NO_ANSWER, f"empty completion: {fmt(NO_ANSWER)}")
        reply = _pool.verify(answer, pred)
        if reply.get("unscored"):
            return Judgement(UNSCORED, f"could not score: {reply['error']}; score again")
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
