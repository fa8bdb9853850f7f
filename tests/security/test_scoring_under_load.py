"""One user cannot stall the others' scoring: math-verify runs in a pool with a per-request budget, and the
score handler stays fast while hostile requests are in flight.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/security/test_scoring_under_load.py
"""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import gradio as gr
import pytest

from grpo_playground.rewards import custom
from grpo_playground.rewards import check_design, score_group
from grpo_playground.rewards.equivalence import (
    EQUIVALENT,
    NO_ANSWER,
    REQUEST_BUDGET_S,
    VERIFY_TIMEOUT_S,
    _pool,
    answer_equivalence,
)
from grpo_playground.rewards.group import COULD_NOT_SCORE
from grpo_playground.tags import DEFAULT_TAGS
from grpo_playground.ui.sandbox_render import render_details, render_report
from grpo_playground.ui.sandbox_tab import NAMES, knob_defaults, score_table

TOWER = "<start_working_out>big<end_working_out><SOLUTION>$9^{9^{9^{9}}}$</SOLUTION>"  # > 2 s in sympy
GOOD = "<start_working_out>6 x 7<end_working_out><SOLUTION>42</SOLUTION>"
LOOP = "def reward(completions, answer, **kwargs):\n    while True:\n        pass\n"


def score(completions: list[str], enabled: list[str], code: str = "", tags=tuple(DEFAULT_TAGS.as_list()),
          visitor: str = "127.0.0.1") -> dict:
    """The /score handler as Gradio calls it for a visitor at address `visitor`."""
    return score_table("\n---\n".join(completions), "42", enabled, "group", *tags, code, "",
                       *knob_defaults().values(), *[1.0] * len(NAMES), visit_from(visitor))


def visit_from(address: str) -> SimpleNamespace:
    """What a handler reads of its gr.Request to tell visitors apart."""
    return SimpleNamespace(headers={}, client=SimpleNamespace(host=address))


@pytest.fixture(scope="module", autouse=True)
def warm_checkers():
    for worker in _pool._workers:  # the first sympy import is not what these tests measure
        worker.warm_up()


def test_a_hostile_request_holds_one_checker_for_its_budget_only():
    # Before: one checker for everybody; 8 power towers held it 8 x 2 s while every other request waited.
    hostile_s = []
    thread = threading.Thread(target=lambda: hostile_s.append(
        _timed(score, [TOWER] * 8, ["answer_equivalence"], "", DEFAULT_TAGS.as_list(), "10.0.0.66")))
    thread.start()
    time.sleep(0.3)
    start = time.monotonic()
    table = score([GOOD] * 8, ["answer_equivalence"])
    benign_s = time.monotonic() - start
    thread.join()
    assert [row[0] for row in table.values.tolist()] == [EQUIVALENT] * 8  # served by the other checker
    assert benign_s < 2.0  # before: 8 x 2 s behind the towers (19 s measured)
    assert hostile_s[0] < REQUEST_BUDGET_S + VERIFY_TIMEOUT_S  # not 8 x 2 s


def test_a_timed_out_checker_answers_again_at_once():
    # Before: a timeout killed the checker, and the next question paid a fresh sympy import (1-3 s) in a new process.
    # Now the checker process stays, and answers through a warm fork (sympy imported) in place of the stuck one.
    # (Held by the processes, not a stopwatch: on two loaded cores even the warm answer took 0.58 s once.)
    worker = _pool._workers[0]
    worker.warm_up()
    checker, stuck = worker._proc.pid, worker._answerer
    assert "took over" in worker.verify("4", "$9^{9^{9^{9}}}$", timeout=0.5)["error"]
    assert worker.verify("1/2", "0.5")["equivalent"] is True
    assert worker._proc.pid == checker, "the checker process was started again: a fresh sympy import"
    assert worker._answerer not in (None, stuck)


def test_four_hostile_users_delay_others_by_at_most_one_budget():
    with ThreadPoolExecutor(4) as pool:
        hostile = [pool.submit(_timed, score, [TOWER] * 8, ["answer_equivalence"], "", DEFAULT_TAGS.as_list(),
                               f"10.0.0.{i}") for i in range(4)]
        time.sleep(0.3)
        benign_s = _timed(score, [GOOD] * 8, ["answer_equivalence"])
        times = [f.result() for f in hostile]
    assert benign_s < REQUEST_BUDGET_S + 2.0  # before: 95 s measured
    assert max(times) < REQUEST_BUDGET_S + VERIFY_TIMEOUT_S + 2.0


def _flood(visitors: list[str], per_visitor: int, stop: threading.Event) -> list[threading.Thread]:
    """`per_visitor` threads per address sending groups of 8 power towers until `stop`."""
    def send(visitor):
        while not stop.is_set():
            score([TOWER] * 8, ["answer_equivalence"], "", DEFAULT_TAGS.as_list(), visitor)

    threads = [threading.Thread(target=send, args=(v,)) for v in visitors for _ in range(per_visitor)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    return threads


def _honest_rows(visitor: str, rounds: int) -> list:
    return [row[0] for _ in range(rounds) for row in score([GOOD] * 8, ["answer_equivalence"], "",
                                                           DEFAULT_TAGS.as_list(), visitor).values.tolist()]


@pytest.mark.slow
def test_one_visitor_saturating_the_checkers_cannot_starve_another():
    # Before: one first-come queue for both checkers. 12 requests of power towers from one address filled it, an
    # honest group waited behind them past its 3 s budget, and its correct answers came back -3.0 in a normal reply.
    stop = threading.Event()
    threads = _flood(["10.0.0.66"], 12, stop)
    try:
        rows = _honest_rows("10.0.0.7", 3)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert rows == [EQUIVALENT] * 24  # the towers hold one checker at most: the other scores every honest answer


@pytest.mark.slow
def test_a_score_that_could_not_be_computed_says_so():
    # Two addresses of towers can hold both checkers: an honest answer is then scored or marked, never -3.0.
    stop = threading.Event()
    threads = _flood(["10.0.0.66", "10.0.0.67"], 6, stop)
    try:
        rows = _honest_rows("10.0.0.7", 3)
        tower = score([TOWER] * 2, ["answer_equivalence"], "", DEFAULT_TAGS.as_list(), "10.0.0.8")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert set(rows) <= {EQUIVALENT, COULD_NOT_SCORE} and EQUIVALENT in rows, rows
    # a number that depends on a missing score is not one either: the total, and every advantage of the group
    assert tower.values.tolist() == [[COULD_NOT_SCORE] * 3] * 2


def test_unscored_answers_are_marked_in_the_report_and_cost_training_the_no_answer_score(monkeypatch):
    monkeypatch.setattr(_pool, "verify", lambda gold, pred: {"error": "skipped: busy", "unscored": True})
    group = score_group([GOOD, GOOD], "42", {"answer_equivalence": 1.0})
    report = render_report(group, check_design({"answer_equivalence": 1.0}), [])
    assert "2 of 2 completions could not be scored" in report and "mean could not score" in report
    assert "✔ Reward design check" not in report  # the probes were not scored either: no verdict on the weights
    assert "could not score: skipped: busy" in render_details(group)
    # TRL's path: in a job no stranger shares the checkers, and "no score" would let a model dodge the -2.5 of a
    # wrong answer by writing what sympy chokes on
    assert answer_equivalence(None, [GOOD], "42") == [NO_ANSWER]


def test_a_chats_replies_are_scored_once_within_one_budget(monkeypatch):
    # Before: the Chat tab re-scored every finished reply on every refresh with no deadline and any gold: 3 replies
    # against this gold took 20.5 s, and with 300-token replies it was still running after 600 s.
    from grpo_playground.ui.chat_scores import ReplyScores

    asked = []
    verify = _pool.verify
    monkeypatch.setattr(_pool, "verify", lambda gold, pred: asked.append(pred) or verify(gold, pred))
    scores = ReplyScores(r"\left(9^{9^{9^{9}}}\right)", ["answer_equivalence"])
    start = time.monotonic()
    for slot in range(3):
        scores.add(slot, f"reply {slot}", "<end_working_out><SOLUTION>$9^{9^{9}}$</SOLUTION>")
        scores.markdown()
    assert time.monotonic() - start < REQUEST_BUDGET_S + VERIFY_TIMEOUT_S + 1.0  # one budget for the question
    for _ in range(50):  # the stream redraws the table many times a second
        table = scores.markdown()
    assert len(asked) <= 3 and table.count("| reply ") == 3
    words = ReplyScores("8 apples", ["check_answer"])  # the sandbox's gold check (before: any text up to 200)
    words.add(0, "checkpoint", GOOD)
    assert "cannot score: the gold answer '8 apples' carries words" in words.markdown()


def _timed(fn, *args) -> float:
    start = time.monotonic()
    fn(*args)
    return time.monotonic() - start


def test_50_concurrent_scorers_stay_fast_while_hostile_requests_run(monkeypatch, app_url):
    # 50 clients x 8 completions with the default rewards, while 16 backtracking requests (one-letter tags, 64 x
    # "abb" * 1039: ~20 s each before the linear patterns), a 10,000-completion request, an infinite-loop custom
    # reward and a group of power towers are in flight. Measured in the handler (server-side time, as Gradio runs
    # it: one thread per event), 50 threads at once; the owner's /status answers through the app meanwhile.
    monkeypatch.setenv(custom.ENABLE_ENV, "1")
    defaults = ["match_format_approximately", "check_answer", "check_numbers"]
    score([GOOD] * 8, defaults)  # first-call imports are not what this measures
    alone = _fifty_clients(defaults)  # the baseline: nobody hostile, on this machine now
    stop = threading.Event()

    def hostile(args):
        while not stop.is_set():
            try:
                score(*args)
            except gr.Error:
                pass  # refused (too many completions) or timed out: what matters is what it costs others

    one_letter = ((["abb" * 1039] * 64, defaults, "", ("s", "a", "b", "c")),) * 16
    others = (([GOOD] * 10_000, defaults), ([GOOD] * 8, defaults, LOOP), ([TOWER] * 8, ["answer_equivalence"]))
    attackers = [threading.Thread(target=hostile, args=(args,)) for args in (*one_letter, *others)]
    for thread in attackers:
        thread.start()
    time.sleep(0.5)
    try:
        with ThreadPoolExecutor(1) as pool:
            status = pool.submit(_owner_status, app_url)
            times = _fifty_clients(defaults)
            status_s = status.result()
    finally:
        stop.set()
        for thread in attackers:
            thread.join()
    p95, alone_p95 = (statistics.quantiles(t, n=20)[-1] for t in (times, alone))
    print(f"p95 {p95 * 1000:.0f} ms, median {statistics.median(times) * 1000:.0f} ms over {len(times)} requests "
          f"(alone: p95 {alone_p95 * 1000:.0f} ms); /status {status_s:.2f} s")
    # Before the linear patterns a benign request waited behind ~20-s backtracking matches that hold the GIL. Now the
    # attackers only share the two cores: here p95 356-450 ms alone, 82-234 ms under attack; 1.2 s under attack on a
    # loaded CI machine (so a fixed 1-s bound flaked). The bound scales with the baseline measured above, and stays
    # far below the 20 s of before.
    assert p95 <= max(2.5, 10 * alone_p95)
    assert p95 < 5.0
    assert status_s < 5.0


def _fifty_clients(enabled: list[str]) -> list[float]:
    """Seconds each of 50 clients scoring a group of 8 at once waits, measured in the handler."""
    with ThreadPoolExecutor(50) as pool:
        return list(pool.map(lambda _: _timed(score, [GOOD] * 8, enabled), range(50)))


def _owner_status(app_url: str) -> float:
    """Seconds the app's /status takes to answer for a finished run, through its queue."""
    from gradio_client import Client

    from grpo_playground.run_layout import runs_dir, write_status

    run = runs_dir() / "20260101-000000-under-load"
    run.mkdir(exist_ok=True)
    write_status(run, state="finished", step=5, max_steps=5)
    client = Client(app_url, verbose=False)
    start = time.monotonic()
    assert client.predict(run.name, api_name="/status")["state"] == "finished"
    return time.monotonic() - start
