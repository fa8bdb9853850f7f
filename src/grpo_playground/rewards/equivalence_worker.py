"""The math-verify child process of answer_equivalence (see equivalence.py for why it is a process).

    python -m grpo_playground.rewards.equivalence_worker   # reads {"gold","pred"} JSON lines on stdin

Each line gets one JSON line back: {"equivalent": bool, "parsed": str}, {"no_answer": true} or {"error": str}.

Importing sympy takes 1-3 s, so a checker killed on a timeout must not cost that again: this process imports
math-verify once and then forks the answering process, announced by {"ready": true, "pid": N}. When the app
SIGKILLs that pid (a question past its deadline), a fresh, already warm copy is forked in milliseconds and
announces itself the same way. At end of input the answering process exits 0, and so does this one.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import resource
import signal
import sys

WORKER_MEMORY_BYTES = 2 << 30
CHECKER_NICENESS = 10
PR_SET_PDEATHSIG = 1
# GSM8K golds carry thousands separators ("1,600"); math-verify would read them as a list of two numbers.
THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")


def say(out, obj: dict) -> None:
    out.write(json.dumps(obj) + "\n")
    out.flush()


def answer(out, parse, verify) -> None:
    """Read {"gold","pred"} lines, answer {"equivalent","parsed"} / {"no_answer"} / {"error"}, until EOF."""
    for line in sys.stdin:
        try:
            req = json.loads(line)
            # The gold is a bare final answer ("42", "1/2", "\\frac{1}{2}"): math mode makes LaTeX parse.
            gold_text = req["gold"].strip()
            if THOUSANDS.match(gold_text):
                gold_text = gold_text.replace(",", "")
            gold = parse(f"${gold_text}$", parsing_timeout=None)
            pred = parse(req["pred"], parsing_timeout=None)
            if not gold:
                say(out, {"error": f"math-verify cannot read the gold answer {req['gold']!r}"})
            elif not pred:
                say(out, {"no_answer": True})
            else:
                ok = verify(gold, pred, timeout_seconds=None)
                say(out, {"equivalent": bool(ok), "parsed": str(pred[-1])[:80]})
        except MemoryError:
            say(out, {"error": "math-verify ran out of its memory cap"})
        except Exception as exc:  # noqa: BLE001 - any parse failure of untrusted text is an answer, not a crash
            say(out, {"error": f"math-verify failed: {type(exc).__name__}"})


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
