"""Gold answers as plain number strings: the form the reward functions compare against.

The rewards test `guess == answer` first and fall back to float ratios, so one canonical spelling per number
("1600", not "1,600" or "1600.0") is what makes an exact answer earn the exact-match score.
"""

from __future__ import annotations

import re

# A plain decimal with optional sign and thousands separators: "1,600", "-10", "3.50", "+7", ".5".
_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?")
# Wrappers that carry no value: "$18", "\$18", "18%", "18.", "\boxed{18}" (OpenMath / DAPO answers).
_BOXED = re.compile(r"^\\boxed\{(.*)\}$", re.DOTALL)
GSM8K_MARKER = "####"
# GSM8K solutions carry calculator annotations "<<48/2=24>>" that no model should learn to write.
_CALCULATOR = re.compile(r"<<[^<>]*>>")


def normalize_number(text: str) -> str | None:
    """Canonical number string for `text`, or None when it is not a plain number.

    >>> normalize_number("1,600"), normalize_number("-10"), normalize_number("$3.50"), normalize_number("5.0")
    ('1600', '-10', '3.5', '5')
    >>> normalize_number("\\\\frac{1}{2}") is None
    True
    """
    value = text.strip()
    boxed = _BOXED.match(value)
    if boxed:
        value = boxed.group(1).strip()
    value = value.replace("\\$", "").replace("$", "").replace("\\%", "").rstrip("%").rstrip(".").strip()
    if not value or not any(c.isdigit() for c in value) or not _NUMBER.fullmatch(value):
        return None
    sign = "-" if value.startswith("-") else ""
    digits = value.lstrip("+-").replace(",", "")
    whole, _, frac = digits.partition(".")
    whole = whole.lstrip("0") or "0"
    frac = frac.rstrip("0")
    if whole == "0" and not frac:
        sign = ""  # "-0" and "0.0" are both zero
    return f"{sign}{whole}.{frac}" if frac else f"{sign}{whole}"


_FRACTION = re.compile(r"[+-]?\d+\s*/\s*\d+")
_NUMBER_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
                 "sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred "
                 "thousand million half quarter").split()


def gold_answer_problem(text: str) -> str | None:
    """Why `text` cannot be a gold answer the rewards compare against, with the fix; None when it can (a number,
    a fraction such as 3/4, or a LaTeX expression such as \\frac{3}{4} for the equivalence reward).

    >>> gold_answer_problem("1,600") is None, gold_answer_problem("\\\\frac{1}{2}") is None
    (True, True)
    >>> gold_answer_problem("8 apples")
    "the gold answer '8 apples' carries words: give the number alone, 8 (the rewards compare numbers)"
    """
    value = text.strip()
    if normalize_number(value) is not None or _FRACTION.fullmatch(value) or "\\" in value:
        return None
    numbers = re.findall(r"[+-]?\d[\d,]*(?:\.\d+)?", value)
    if len(numbers) == 1:
        return (f"the gold answer {value!r} carries words: give the number alone, {normalize_number(numbers[0])} "
                "(the rewards compare numbers)")
    words = [w for w in re.findall(r"[a-z]+", value.lower()) if w in _NUMBER_WORDS]
    if words:
        return f"the gold answer {value!r} is written in words: write it in digits (e.g. eight -> 8)"
    return (f"the gold answer {value!r} is not a number: give the final answer in digits, e.g. 42 "
            "(a fraction as 3/4, or LaTeX such as \\frac{3}{4})")


def split_gsm8k_answer(answer: str) -> tuple[str, str]:
    """GSM8K `answer` field -> (worked solution without calculator annotations, raw final answer after ####).

    Raises ValueError when the `#### N` line is missing, so the caller can count the row as skipped.
    """
    if GSM8K_MARKER not in answer:
        raise ValueError(f"no '{GSM8K_MARKER} N' final-answer line")
    solution, _, final = answer.rpartition(GSM8K_MARKER)
    return _CALCULATOR.sub("", solution).strip(), final.strip()
