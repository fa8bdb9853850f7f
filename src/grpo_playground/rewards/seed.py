"""The seed recipe's four reward functions (scores of the Unsloth Qwen3 GRPO notebook), for any tag set.

Each reward is a small picklable object: `__call__` has TRL's signature
`(prompts, completions, answer, **kwargs) -> list[float]`, `__name__` is its registry name (TRL logs
`rewards/<name>/mean`), and `judge(text, answer)` gives the score of one completion with the reason in
plain words. Scoring and explaining share one code path, so a reason can never disagree with its score.

>>> from grpo_playground.rewards import check_answer
>>> check_answer(None, ["<end_working_out><SOLUTION>42</SOLUTION>", "<SOLUTION>42"], ["42", "42"])
[5.0, -2.0]
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_playground.rewards.patterns import completion_text, patterns_for
from grpo_playground.tags import DEFAULT_TAGS, Tags


@dataclass(frozen=True)
class Judgement:
    score: float
    reason: str


def answers_for(answer, n: int) -> list[str]:
    """TRL passes the dataset column as one answer per completion; a single value is broadcast.
    Numbers (an int column) become text, as the seed's string comparisons expect."""
    if isinstance(answer, (str, int, float)):
        return [str(answer)] * n
    answers = [str(a) for a in answer]
    if len(answers) != n:
        raise ValueError(f"got {n} completions but {len(answers)} answers: give one answer per completion")
    return answers


def fmt(score: float) -> str:
    return f"{score:+g}"


class Reward:
    """Base of the tag-aware rewards: subclasses implement judge(text, answer)."""

    name = ""

    def __init__(self, tags: Tags = DEFAULT_TAGS):
        self.tags = tags
        self.__name__ = self.name

    def judge(self, text: str, answer: str) -> Judgement:
        raise NotImplementedError

    def __call__(self, prompts=None, completions=(), answer="", **kwargs) -> list[float]:
        texts = [completion_text(c) for c in completions]
        return [self.judge(t, a).score for t, a in zip(texts, answers_for(answer, len(texts)))]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.tags!r})"

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self.tags == other.tags

    def __hash__(self) -> int:
        return hash((type(self), self.tags))


class MatchFormatExactly(Reward):
    """1.0 when the strict pattern matches (the seed's value; the Unsloth notebook uses 3.0), else 0."""

    name = "match_format_exactly"
    score_on_match = 1.0

    def judge(self, text: str, answer: str) -> Judgement:
        pats = patterns_for(self.tags)
        if pats.strict_search(text) is not None:
            return Judgement(self.score_on_match, f"strict format matched: {fmt(self.score_on_match)}")
        return Judgement(0.0, f"{pats.why_no_strict_match(text)}: 0")


class MatchFormatApproximately(Reward):
    """+0.5 for each of reasoning_end, solution_start, solution_end seen exactly once, else -1.0 each.

    The opening reasoning tag is not counted: chat templates often prefill it after the assistant header.
    """

    name = "match_format_approximately"

    def judge(self, text: str, answer: str) -> Judgement:
        t = self.tags
        score, parts = 0.0, []
        for tag in (t.reasoning_end, t.solution_start, t.solution_end):
            n = text.count(tag)
            delta = 0.5 if n == 1 else -1.0
            score += delta
            parts.append(f"{tag} x{n}: {fmt(delta)}")
        return Judgement(score, "; ".join(parts))


def _ratio_band(ratio: float) -> float:
    if 0.9 <= ratio <= 1.1:
        return 2.0
    if 0.8 <= ratio <= 1.2:
        return 1.5
    return -2.5


class CheckAnswer(Reward):
    """The answer in the strict match vs the gold: exact 5.0, equal after strip 3.5, within 10% 2.0,
    within 20% 1.5, other numbers -2.5, not a number -4.5, no strict match `no_match_score` (seed: -2.0)."""

    name = "check_answer"
    no_match_score = -2.0

    def judge(self, text: str, answer: str) -> Judgement:
        pats = patterns_for(self.tags)
        found = pats.strict_search(text)
        if found is None:
            s = self.no_match_score
            return Judgement(s, f"no answer extracted ({pats.why_no_strict_match(text)}): {fmt(s)}")
        guess = found.text
        if guess == answer:
            return Judgement(5.0, f"answer {guess!r} equals the gold exactly: +5")
        if guess.strip() == answer.strip():
            return Judgement(3.5, f"answer {guess!r} equals the gold after trimming spaces: +3.5")
        try:
            ratio = float(guess) / float(answer)
        except (ValueError, ZeroDivisionError, OverflowError) as exc:
            why = "the gold is 0, so no ratio" if isinstance(exc, ZeroDivisionError) else "not a plain number"
            return Judgement(-4.5, f"answer {guess.strip()[:40]!r} vs gold {answer!r}: {why}: -4.5")
        s = _ratio_band(ratio)
        band = {2.0: "within 10% of", 1.5: "within 20% of", -2.5: "more than 20% away from"}[s]
        return Judgement(s, f"answer {guess.strip()} is {band} {answer.strip()} (ratio {ratio:.3g}): {fmt(s)}")


class CheckAnswerStrictNoMatch(CheckAnswer):
    """check_answer with no match at -3.0, below every wrong number (-2.5): not answering stops paying.

    With the seed's -2.0, a completion that rambles on after `</SOLUTION>` (so the strict pattern fails)
    outscores a clean wrong answer; a small model learned that within ~25 GRPO steps.
    """

    name = "check_answer_strict_nomatch"
    no_match_score = -3.0


class CheckNumbers(Reward):
    """The first number after solution_start vs the gold: equal 3.5, different -1.5, none found -2.5,
    unparsable (e.g. '1.2.3', or a gold with commas) 0."""

    name = "check_numbers"

    def judge(self, text: str, answer: str) -> Judgement:
        pats = patterns_for(self.tags)
        found = pats.number_search(text)
        if found is None:
            why = (f"no number after {self.tags.solution_start}" if self.tags.solution_start in text
                   else f"no {self.tags.solution_start} tag")
            return Judgement(-2.5, f"{why}: -2.5")
        guess = found.text
        try:
            gold = float(answer.strip())
            value = float(guess.strip().replace(",", ""))
        except (ValueError, OverflowError):
            return Judgement(0.0, f"number {guess!r} or gold {answer!r} does not parse as a float: 0")
        if value == gold:
            return Judgement(3.5, f"first number after {self.tags.solution_start} is {guess}, equal to the gold: +3.5")
        return Judgement(-1.5, f"first number after {self.tags.solution_start} is {guess}, gold is {answer.strip()}: -1.5")


def get_match_format_exactly_reward(tags: Tags = DEFAULT_TAGS) -> MatchFormatExactly:
    return MatchFormatExactly(tags)


def get_match_format_approximately_reward(tags: Tags = DEFAULT_TAGS) -> MatchFormatApproximately:
    return MatchFormatApproximately(tags)


def get_check_answer_reward(tags: Tags = DEFAULT_TAGS) -> CheckAnswer:
    return CheckAnswer(tags)


def get_check_answer_strict_nomatch_reward(tags: Tags = DEFAULT_TAGS) -> CheckAnswerStrictNoMatch:
    return CheckAnswerStrictNoMatch(tags)


def get_check_numbers_reward(tags: Tags = DEFAULT_TAGS) -> CheckNumbers:
    return CheckNumbers(tags)


match_format_exactly = get_match_format_exactly_reward()
match_format_approximately = get_match_format_approximately_reward()
check_answer = get_check_answer_reward()
check_answer_strict_nomatch = get_check_answer_strict_nomatch_reward()
check_numbers = get_check_numbers_reward()
