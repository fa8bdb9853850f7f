"""Per-completion judgements and their summary: format rate, strict and lenient accuracy, length, re-checks.

Pure Python (the UI may import it). The strict format is the reward engine's own strict pattern, so an eval
"in format" means exactly what `check_answer` needs to score an answer during GRPO.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import asdict, dataclass

from grpo_playground.data.answers import normalize_number
from grpo_playground.rewards.patterns import patterns_for
from grpo_playground.tags import DEFAULT_TAGS, Tags

# Any plain number, commas allowed: the lenient check reads the last one in the text.
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
# Self-checks the recipe expects a healthy GRPO run to grow ("wait, let me re-check").
RECHECK = re.compile(
    r"\b(?:wait|let me (?:re-?)?check|re-?check(?:ing)?|double[- ]check(?:ing)?|let me verify|verify(?:ing)?|"
    r"check(?:ing)? (?:again|my work|the answer))\b",
    re.IGNORECASE,
)


@dataclass
class CompletionGrade:
    """How one eval completion fares (right or wrong, in format or not); the rewards' per-function scores of a
    completion are rewards.CompletionScore."""

    in_format: bool  # the strict pattern matched: what check_answer needs to score anything
    correct: bool  # in format AND the extracted answer equals the gold (after number normalization)
    lenient_correct: bool  # the last number anywhere in the text equals the gold
    rechecks: bool
    guess: str | None  # what the strict pattern extracted
    n_tokens: int
    truncated: bool  # generation hit max_new_tokens without ending its turn

    def to_dict(self) -> dict:
        return asdict(self)


def last_number(text: str) -> str | None:
    numbers = _NUMBER.findall(text)
    return normalize_number(numbers[-1]) if numbers else None


def grade_completion(text: str, answer: str, tags: Tags = DEFAULT_TAGS, n_tokens: int = 0, truncated: bool = False) -> CompletionGrade:
    found = patterns_for(tags).strict_search(text)
    guess = found.text.strip() if found else None
    correct = guess is not None and (guess == answer or normalize_number(guess) == answer)
    return CompletionGrade(
        in_format=found is not None,
        correct=correct,
        lenient_correct=last_number(text) == answer,
        rechecks=bool(RECHECK.search(text)),
        guess=guess,
        n_tokens=n_tokens,
        truncated=truncated,
    )


def _rate(flags: list[bool]) -> tuple[float, float]:
    """Share and its standard error (binomial, sqrt(p(1-p)/n))."""
    n = len(flags)
    p = sum(flags) / n
    return p, math.sqrt(p * (1 - p) / n)


def _mean(values: list[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var / n)


def summarize(scores: list[CompletionGrade], levels: list[int | None] | None = None) -> dict:
    """The metrics of a set of completions, each with its standard error (`<name>_se`)."""
    if not scores:
        raise ValueError("no completions to summarize")
    out: dict = {"n": len(scores)}
    for name, flags in (
        ("format_rate", [s.in_format for s in scores]),
        ("accuracy", [s.correct for s in scores]),
        ("lenient_accuracy", [s.lenient_correct for s in scores]),
        ("recheck_rate", [s.rechecks for s in scores]),
        ("truncated_rate", [s.truncated for s in scores]),
    ):
        out[name], out[f"{name}_se"] = (round(x, 4) for x in _rate(flags))
    mean, se = _mean([s.n_tokens for s in scores])
    out["mean_completion_tokens"], out["mean_completion_tokens_se"] = round(mean, 2), round(se, 2)
    if levels and any(level is not None for level in levels):
        by_level: dict[int, list[CompletionGrade]] = defaultdict(list)
        for score, level in zip(scores, levels):
            if level is not None:
                by_level[level].append(score)
        out["per_level"] = {}
        for level in sorted(by_level):
            group = by_level[level]
            acc, acc_se = _rate([s.correct for s in group])
            fmt, _ = _rate([s.in_format for s in group])
            out["per_level"][str(level)] = {"n": len(group), "accuracy": round(acc, 4), "accuracy_se": round(acc_se, 4), "format_rate": round(fmt, 4)}
    return out
