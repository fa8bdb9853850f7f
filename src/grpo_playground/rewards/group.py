"""Score one GRPO group the way TRL's GRPOTrainer does, and explain every number in plain words.

TRL 1.14.2 (`GRPOTrainer._generate_and_score_completions`): total = sum of weight * score over the reward
functions; advantage = total - group mean; with scale_rewards="group" it is divided by (group std + 1e-4),
where std is torch.std's unbiased (n - 1) estimator; "none" (Dr. GRPO) skips the division. A group whose
std is ~0 gives every completion advantage 0: no gradient from that prompt.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from grpo_playground.rewards.guard import MAX_ABS_SCORE, RewardInputError, bounded_number, charge, check_request
from grpo_playground.rewards.patterns import completion_text, patterns_for
from grpo_playground.rewards.registry import DEFAULT_WEIGHTS, REWARDS, get_reward_funcs
from grpo_playground.rewards.shaping import DEFAULT_SHAPING, Shaping
from grpo_playground.tags import DEFAULT_TAGS, Tags

SCALE_MODES = ("group", "none")
STD_EPS = 1e-4  # TRL adds this to the std before dividing
MAX_TAG_MARKS = 100  # per tag, so a completion of 100k repeated tags does not send 100k marks to a browser
# How a score math-verify did not give (equivalence.UNSCORED, a NaN) is shown; NaN carries on into the completion's
# total and into the group's mean, std and every advantage, which depend on every total: none of them is a number.
COULD_NOT_SCORE = "could not score"


def score_text(value: float, spec: str = "+g") -> str:
    return COULD_NOT_SCORE if math.isnan(value) else format(value, spec)


@dataclass
class Mark:
    """A span of the completion to highlight: what the strict pattern captured, the number, or a tag."""

    start: int
    end: int
    label: str


@dataclass
class CompletionScore:
    text: str
    scores: dict[str, float]
    reasons: dict[str, str]
    total: float
    advantage: float = 0.0
    strict_answer: str | None = None
    number: str | None = None
    tag_counts: dict[str, int] = field(default_factory=dict)
    marks: list[Mark] = field(default_factory=list)


@dataclass
class GroupScore:
    names: list[str]
    weights: dict[str, float]  # extra scores (a custom reward) count with weight 1
    completions: list[CompletionScore]
    mean: float
    std: float
    scale: str
    zero_variance: bool
    zero_variance_reason: str | None

    @property
    def totals(self) -> list[float]:
        return [c.total for c in self.completions]

    @property
    def advantages(self) -> list[float]:
        return [c.advantage for c in self.completions]

    @property
    def unscored(self) -> int:
        """Completions with a score that could not be computed (their total is NaN)."""
        return sum(math.isnan(c.total) for c in self.completions)

    def table(self) -> tuple[list[str], list[list[float]]]:
        """Headers (one per reward function, then total, advantage) and one row per completion."""
        headers = [*self.names, "total", "advantage"]
        rows = [[*(c.scores[n] for n in self.names), c.total, c.advantage] for c in self.completions]
        return headers, rows


def one_group_scale(scale_rewards: str) -> str:
    """The scale that reproduces TRL's `scale_rewards` within one group: "batch" divides by the whole batch's
    std, which one group cannot show, so "group" is the closest."""
    return "none" if scale_rewards == "none" else "group"


def group_advantages(totals: list[float], scale: str = "group") -> tuple[float, float, list[float]]:
    """(mean, std, advantages) as TRL computes them for one group."""
    if scale not in SCALE_MODES:
        raise ValueError(f"scale {scale!r} is not one of {SCALE_MODES}: 'group' (GRPO) or 'none' (Dr. GRPO)")
    n = len(totals)
    mean = sum(totals) / n
    # torch.std(unbiased) of one value is nan; TRL only builds groups of num_generations >= 2.
    std = math.sqrt(sum((t - mean) ** 2 for t in totals) / (n - 1)) if n > 1 else 0.0
    divisor = std + STD_EPS if scale == "group" else 1.0
    return mean, std, [(t - mean) / divisor for t in totals]


def explain_extraction(text: str, tags: Tags) -> tuple[str | None, str | None, dict[str, int], list[Mark]]:
    """What the strict pattern captured, the number check_numbers reads, and every tag's count and places."""
    pats = patterns_for(tags)
    marks: list[Mark] = []
    strict = pats.strict_search(text)
    if strict is not None:
        marks.append(Mark(strict.start, strict.end, "answer (strict match)"))
    number = pats.number_search(text)
    if number is not None:
        marks.append(Mark(number.start, number.end, "number (check_numbers)"))
    counts = {}
    for tag in tags.as_list():
        counts[tag] = text.count(tag)
        pos = text.find(tag)
        for _ in range(min(counts[tag], MAX_TAG_MARKS)):
            marks.append(Mark(pos, pos + len(tag), f"{tag} x{counts[tag]}"))
            pos = text.find(tag, pos + len(tag))
    return (
        strict.text if strict is not None else None,
        number.text if number is not None else None,
        counts,
        sorted(marks, key=lambda m: (m.start, -m.end)),
    )


def _zero_variance_reason(scored: list[CompletionScore], names: list[str]) -> str:
    n = len(scored)
    if n == 1:
        return "one completion: GRPO compares completions within a group, so a group of 1 gives no gradient"
    head = f"all {n} completions scored {scored[0].total:g}: advantage 0 for each, so this group gives no gradient"
    answer_checks = [name for name in names if REWARDS[name].checks_answer] or names
    common, count = Counter(c.reasons[answer_checks[0]] for c in scored).most_common(1)[0]
    return f"{head}. {answer_checks[0]}: {common}" + (f" ({count} of {n})" if count < n else "")


def score_group(
    completions: list,
    answer: str | list[str],
    weights: Mapping[str, float] = DEFAULT_WEIGHTS,
    tags: Tags = DEFAULT_TAGS,
    scale: str = "group",
    extra_scores: Mapping[str, list[float]] | None = None,
    shaping: Shaping = DEFAULT_SHAPING,
) -> GroupScore:
    """Score a group against one gold answer, or one per completion (a list, as TRL passes a dataset column).
    `extra_scores` (e.g. a custom reward) join the total with weight 1."""
    texts = [completion_text(c) for c in completions]
    answers = [str(a) if isinstance(a, (int, float)) else a  # a numeric dataset column
               for a in (answer if isinstance(answer, list) else [answer] * max(len(texts), 1))]
    if len(answers) != max(len(texts), 1):
        raise RewardInputError(f"{len(answers)} gold answers for {len(texts)} completions: give one, or one each")
    for gold in answers:
        check_request(texts, gold)
    funcs, ws = get_reward_funcs(weights, tags, shaping)
    names = [f.__name__ for f in funcs]
    extra = {}
    for name, values in (extra_scores or {}).items():
        if len(values) != len(texts):
            raise ValueError(f"{name} gave {len(values)} scores for {len(texts)} completions")
        extra[name] = [bounded_number(f"{name} score {i}", v, MAX_ABS_SCORE) for i, v in enumerate(values)]
    scored = []
    for i, text in enumerate(texts):
        charge(i, len(texts))
        judged = {f.__name__: f.judge(text, answers[i]) for f in funcs}
        scores = {n: j.score for n, j in judged.items()}
        total = sum(w * scores[n] for n, w in zip(names, ws)) + sum(v[i] for v in extra.values())
        strict, number, counts, marks = explain_extraction(text, tags)
        scores.update({n: v[i] for n, v in extra.items()})
        scored.append(
            CompletionScore(text, scores, {n: j.reason for n, j in judged.items()}, total, 0.0, strict, number, counts, marks)
        )
    mean, std, advantages = group_advantages([c.total for c in scored], scale)
    for c, a in zip(scored, advantages):
        c.advantage = a
    zero = math.isclose(std, 0.0, abs_tol=1e-8)  # torch.isclose(std, 0) in TRL: frac_reward_zero_std
    return GroupScore(
        [*names, *extra], {**dict(zip(names, ws)), **{n: 1.0 for n in extra}}, scored, mean, std, scale, zero, _zero_variance_reason(scored, names) if zero else None
    )
