"""The math-verify child process of answer_equivalence (see equivalence.py for why it is a process).

    python -m grpo_playground.rewards.equivalence_worker   # reads {"id","until","gold","pred"} JSON lines on stdin

Each line gets one JSON line back, with its id: {"equivalent": bool, "parsed": str}, {"no_answer": true},
{"error": str}, or {"expired": true} for a question read after its deadline ("until", time.time()): the app
stopped waiting for it, so it is not worked on (a question the app's kill left unread reaches the next answerer).

Importing sympy takes 1-3 s, so a checker killed on a timeout must not cost that again: this process imports
math-verify once and then forks the answering process, announced by {"ready": true, "pid": N}. When the app
SIGKILLs that pid (a question past its deadline), a fresh, already warm copy is forked in milliseconds and
announces itself the same way. At end of input the answering process exits 0, and so does this one.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import re
import resource
import signal
import sys
import time

WORKER_MEMORY_BYTES = 2 << 30
CHECKER_NICENESS = 10
PR_SET_PDEATHSIG = 1
# GSM8K golds carry thousands separators ("1,600"); math-verify would read them as a list of two numbers.
THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")


def say(out, obj: dict) -> None:
    out.write(json.dumps(obj) + "\n")
    out.flush()


def answer(out, parse, verify) -> None:
    """Read {"id","until","gold","pred"} lines and answer each with its id, until EOF."""
    for line in sys.stdin:
        try:
            req = json.loads(line)
        except ValueError:
            req = None
        if not isinstance(req, dict):
            say(out, {"id": None, "error": "math-verify got a line that is not a JSON object"})
        elif time.time() > req.get("until", math.inf):
            say(out, {"id": req.get("id"), "expired": True})
        else:
            say(out, {"id": req.get("id"), **judge(req, parse, verify)})


def judge(req: dict, parse, verify) -> dict:
    """{"equivalent","parsed"} / {"no_answer"} / {"error"} for one {"gold","pred"} question."""
    try:
        # The gold is a bare final answer ("42", "1/2", "\\frac{1}{2}"): math mode makes LaTeX parse.
        gold_text = req["gold"].strip()
        if THOUSANDS.match(gold_text):
            gold_text = gold_text.replace(",", "")
        gold = parse(f"${gold_text}$", parsing_timeout=None)
        pred = parse(req["pred"], parsing_timeout=None)
        if not gold:
            return {"error": f"math-verify cannot read the gold answer {req['gold']!r}"}
        if not pred:
            return {"no_answer": True}
        return {"equivalent": bool(verify(gold, pred, timeout_seconds=None)), "parsed": str(pred[-1])[:80]}
    except MemoryError:
        return {"error": "math-verify ran out of its memory cap"}
    except Exception as exc:  # noqa: BLE001 - any parse failure of untrusted text is an answer, not a crash
        return {"error": f"math-verify failed: {type(exc).__name__}"}


def serve() -> None:
    """Import math-verify once, then keep one forked answering process alive (see the module docstring)."""
    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    # A checker busy on a stranger's power tower yields the CPU to the app's own request threads.
    os.nice(CHECKER_NICENESS)
    # The protocol owns the real stdout; anything a library prints goes to stderr instead of corrupting it.
    out, sys.stdout = sys.stdout, sys.stderr
    from math_verify import parse, verify

    parse("$1$", parsing_timeout=None)  # load the grammar here, once, not in every fork
    while True:
        pid = os.fork()
        if pid == 0:
            ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # never outlive this process
            say(out, {"ready": True, "pid": os.getpid()})
            answer(out, parse, verify)
            out.flush()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:  # end of input: the app is done with us
            return


if __name__ == "__main__":
    serve()
