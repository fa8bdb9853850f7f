"""Fifty visitors scoring at once while one flood at a time runs (issue 38's load): p95 against a baseline.

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.scoring_load [--rounds 3]

Each row: 50 threads each score a group of 8 honest completions with the default rewards the way the sandbox's
`/score` handler does (one thread per event, a visitor per address: scoring_request around score_group; benchmarks
may not import the UI), timed around it, while one
flood runs from other addresses (after a warm-up round); then one visitor's group of 8 honest answers scored with answer_equivalence,
counted as scored right, "could not score" or -3.0. The baseline (no flood) is measured in the same run, so the
ratio holds on whatever machine runs it. Prints a Markdown table (BENCHMARKS.md keeps one).
"""

from __future__ import annotations

import argparse
import math
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from grpo_playground.rewards import score_group
from grpo_playground.rewards.equivalence import EQUIVALENT, NO_ANSWER, VISITOR, _pool
from grpo_playground.rewards.group import COULD_NOT_SCORE
from grpo_playground.rewards.scoring_request import scoring_request
from grpo_playground.tags import DEFAULT_TAGS, Tags

GOOD = "<start_working_out>6 x 7<end_working_out><SOLUTION>42</SOLUTION>"
TOWER = "<start_working_out>big<end_working_out><SOLUTION>$9^{9^{9^{9}}}$</SOLUTION>"  # > 2 s in sympy
DEFAULTS = ["match_format_approximately", "check_answer", "check_numbers"]
TAGS = tuple(DEFAULT_TAGS.as_list())
# (name, [(completions, rewards, tags, address)] sent in a loop, one thread each)
FLOODS = [
    ("none (baseline)", []),
    ("power towers, 2 addresses x 6", [([TOWER] * 8, ["answer_equivalence"], TAGS, f"10.1.0.{i % 2}")
                                       for i in range(12)]),
    ("backtracking groups, 16", [(["abb" * 1039] * 64, DEFAULTS, ("s", "a", "b", "c"), f"10.2.0.{i}")
                                 for i in range(16)]),
    ("10,000 completions, 1", [([GOOD] * 10_000, DEFAULTS, TAGS, "10.3.0.1")]),
    ("none (baseline, again)", []),  # how much the machine itself moved during the run
]


def score(completions: list[str], enabled: list[str], tags=TAGS, address: str = "10.9.0.1"):
    """What the /score handler runs for the visitor at `address` (its gold check and table aside)."""
    visitor = VISITOR.set(address)
    try:
        with scoring_request(sum(map(len, completions))):
            return score_group(completions, "42", {name: 1.0 for name in enabled}, Tags(*tags), "group")
    finally:
        VISITOR.reset(visitor)


def timed(fn, *args) -> float:
    start = time.monotonic()
    fn(*args)
    return time.monotonic() - start


def fifty_clients() -> list[float]:
    with ThreadPoolExecutor(50) as pool:
        return list(pool.map(lambda i: timed(score, [GOOD] * 8, DEFAULTS, TAGS, f"10.9.1.{i}"), range(50)))


def honest_answers() -> list:
    group = score([GOOD] * 8, ["answer_equivalence"], TAGS, "10.9.2.1")
    return [COULD_NOT_SCORE if math.isnan(c.scores["answer_equivalence"]) else c.scores["answer_equivalence"]
            for c in group.completions]


def measure(senders: list, rounds: int) -> tuple[list[float], list]:
    stop = threading.Event()

    def flood(completions, enabled, tags, address):
        while not stop.is_set():
            try:
                score(completions, enabled, tags, address)
            except ValueError:
                pass  # refused (busy, too large): what matters is what it costs the others

    threads = [threading.Thread(target=flood, args=sender) for sender in senders]
    for thread in threads:
        thread.start()
    time.sleep(1.0 if senders else 0)
    try:
        times, answers = [], []
        for _ in range(rounds):
            times += fifty_clients()
            answers += honest_answers()
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    return times, answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of 50 clients (and one honest group) per row")
    args = parser.parse_args()
    for worker in _pool._workers:  # the first sympy import is not what this measures
        worker.warm_up()
    fifty_clients()  # first calls and the thread pool's start are not what this measures
    print("| flood | requests | median ms | p95 ms | p95 / baseline | honest answer_equivalence: right / "
          "could not score / -3.0 |")
    print("|---|---|---|---|---|---|")
    baseline = None
    for name, senders in FLOODS:
        times, answers = measure(senders, args.rounds)
        p95 = statistics.quantiles(times, n=20)[-1]
        baseline = baseline or p95
        counts = [sum(a == value for a in answers) for value in (EQUIVALENT, COULD_NOT_SCORE, NO_ANSWER)]
        print(f"| {name} | {len(times)} | {statistics.median(times) * 1000:.1f} | {p95 * 1000:.1f} | "
              f"{p95 / baseline:.2f} | {' / '.join(map(str, counts))} of {len(answers)} |", flush=True)


if __name__ == "__main__":
    main()
