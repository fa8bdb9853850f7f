"""The math-verify child process of answer_equivalence (see equivalence.py for why it is a process).

    python -m grpo_playground.rewards.equivalence_worker   # reads {"gold","pred"} JSON lines on stdin

Each line gets one JSON line back: {"equivalent": bool, "parsed": str}, {"no_answer": true} or {"error": str}.
"""

from __future__ import annotations

import json
import re
import resource
import sys

WORKER_MEMORY_BYTES = 2 << 30
# GSM8K golds carry thousands separators ("1,600"); math-verify would read them as a list of two numbers.
THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")


def say(out, obj: dict) -> None:
    out.write(json.dumps(obj) + "\n")
    out.flush()


def serve() -> None:
    """Child side: read {"gold","pred"} lines, answer {"equivalent","parsed"} / {"no_answer"} / {"error"}."""
    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    # The protocol owns the real stdout; anything a library prints goes to stderr instead of corrupting it.
    out, sys.stdout = sys.stdout, sys.stderr
    from math_verify import parse, verify

    say(out, {"ready": True})
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


if __name__ == "__main__":
    serve()
