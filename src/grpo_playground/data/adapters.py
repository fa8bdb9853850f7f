"""Row adapters: one function per source schema, each turning a raw row into the normalized example.

An adapter raises `Skip(reason)` for a row it cannot normalize; the loader counts reasons. A schema that does not
fit the file at all (wrong columns everywhere) is an error instead, raised by `check_columns` on the first row.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from grpo_playground.data.answers import GSM8K_MARKER, normalize_number, split_gsm8k_answer
from grpo_playground.data.examples import format_completion, make_example
from grpo_playground.tags import Tags

MAX_PROBLEM_CHARS = 8_000
MAX_SOLUTION_CHARS = 32_000
_THINK_TAGS = re.compile(r"</?think>")


class Skip(Exception):
    """A row that cannot be normalized; the message is the reason counted in LoadResult.skipped."""


# Columns each schema needs (with_solution=False / True).
SCHEMAS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "gsm8k": (("question", "answer"), ("question", "answer")),
    "openmath": (("problem", "expected_answer"), ("problem", "generated_solution", "expected_answer")),
    "dapo": (("prompt", "solution"), ("prompt", "solution")),
}


def check_columns(row: dict, needed: tuple[str, ...], source: str) -> None:
    missing = [c for c in needed if c not in row]
    if missing:
        raise ValueError(
            f"{source}: the rows have no column(s) {missing}; columns present: {sorted(row)}. "
            "Pick the source kind that matches the file, or use file:PATH?question=COL&answer=COL"
        )


def _text(row: dict, column: str, limit: int) -> str:
    value = row.get(column)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise Skip(f"empty {column}")
    text = str(value).strip()
    if len(text) > limit:
        raise Skip(f"{column} longer than {limit} characters")
    return text


def _number(raw: str, column: str) -> str:
    number = normalize_number(raw)
    if number is None:
        raise Skip(f"non-numeric {column}")
    return number


def gsm8k_row(row: dict, tags: Tags, with_solution: bool, source: str) -> dict:
    question = _text(row, "question", MAX_PROBLEM_CHARS)
    raw = _text(row, "answer", MAX_SOLUTION_CHARS)
    try:
        solution, final = split_gsm8k_answer(raw)
    except ValueError:
        raise Skip(f"answer without '{GSM8K_MARKER} N'") from None
    answer = _number(final, "answer")
    completion = format_completion(solution, answer, tags) if with_solution else None
    return make_example(question, answer, source, tags, completion)


def openmath_row(row: dict, tags: Tags, with_solution: bool, source: str) -> dict:
    problem = _text(row, "problem", MAX_PROBLEM_CHARS)
    answer = _number(_text(row, "expected_answer", MAX_PROBLEM_CHARS), "expected_answer")
    completion = None
    if with_solution:
        # The solution's own <think> markers would teach a second reasoning format beside the recipe's tags.
        reasoning = _THINK_TAGS.sub("", _text(row, "generated_solution", MAX_SOLUTION_CHARS)).strip()
        completion = format_completion(reasoning, answer, tags)
    return make_example(problem, answer, source, tags, completion)


def dapo_row(row: dict, tags: Tags, with_solution: bool, source: str) -> dict:
    if with_solution:
        raise Skip("no worked solution (DAPO rows hold only the final answer: use them for GRPO, not SFT)")
    problem = _text(row, "prompt", MAX_PROBLEM_CHARS)
    answer = _number(_text(row, "solution", MAX_PROBLEM_CHARS), "solution")
    return make_example(problem, answer, source, tags)


def mapped_row_adapter(columns: dict[str, str]) -> Callable[[dict, Tags, bool, str], dict]:
    """Adapter for a file with user-named columns: question, answer (a number, or GSM8K style with '#### N'),
    optional solution (worked reasoning, needed for SFT) and level (integer)."""

    def adapt(row: dict, tags: Tags, with_solution: bool, source: str) -> dict:
        question = _text(row, columns["question"], MAX_PROBLEM_CHARS)
        raw = _text(row, columns["answer"], MAX_SOLUTION_CHARS)
        solution = None
        if GSM8K_MARKER in raw:
            solution, raw = split_gsm8k_answer(raw)
        answer = _number(raw, columns["answer"])
        if columns.get("solution"):
            solution = _text(row, columns["solution"], MAX_SOLUTION_CHARS)
        completion = None
        if with_solution:
            if not solution:
                raise Skip("no worked solution (map one with &solution=COLUMN)")
            completion = format_completion(solution, answer, tags)
        level = None
        if columns.get("level"):
            try:
                level = int(float(_text(row, columns["level"], 32)))
            except ValueError:
                raise Skip(f"non-integer {columns['level']}") from None
        return make_example(question, answer, source, tags, completion, level)

    return adapt


ADAPTERS = {"gsm8k": gsm8k_row, "openmath": openmath_row, "dapo": dapo_row}
