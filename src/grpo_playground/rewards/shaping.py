"""Reward shapes GRPO users reach for beyond the seed's set: length and repetition terms, and a format gate.

Formulas from huggingface/open-r1 `src/open_r1/rewards.py` (its defaults too):
- `cosine_scaled` ("Demystifying Long Chain-of-Thought", `get_cosine_scaled_reward`): a correct answer earns
  1.0 at length 0 falling along a cosine to 0.5 at `cosine_max_len` characters; a wrong one -1.0 rising to -0.5.
  Short and right beats long and right; when wrong, thinking longer is punished less.
- `soft_overlong` (DAPO eq. 13, `get_soft_overlong_punishment`): 0 up to max_completion_length - buffer tokens,
  then falling linearly to -1 at max_completion_length. Penalises running into the limit, never shortness.
- `repetition_penalty` (`get_repetition_penalty_reward`, language "en"): over the lower-cased words,
  (1 - distinct n-grams / n-grams) * max_penalty. 0 for text without repeats, max_penalty for one phrase
  repeated forever.
- the format gate (open-instruct PR #659): an answer-checking reward counts only when the strict format
  pattern matches; otherwise it scores the bottom of its range, so failing the format never beats a wrong
  answer (open-instruct's 0 is the bottom of its 0/1 reward).

Where open-r1 checks correctness with math-verify, `cosine_scaled` uses the strict pattern's answer against
the gold as a number (commas dropped), as the seed's rewards do: same extraction, cheap, no child process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grpo_playground.rewards.patterns import completion_text, patterns_for
from grpo_playground.rewards.seed import Judgement, Reward, answers_for, fmt
from grpo_playground.tags import DEFAULT_TAGS, Tags

# open-r1's defaults of get_cosine_scaled_reward
COSINE_CORRECT = (0.5, 1.0)  # (at max_len, at length 0)
COSINE_WRONG = (-1.0, -0.5)  # (at length 0, at max_len)
# BPE tokenizers average about 4 characters of English per token: the estimate where no token ids are given
# (the sandbox's typed text); in training TRL passes each completion's real token ids.
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class Shaping:
    """The knobs of the shaped rewards (the recipe's `rewards:` section) and the run's completion limit."""

    gate_on_format: bool = False
    max_completion_length: int = 1024  # tokens: grpo.max_completion_length
    overlong_buffer: int = 256  # tokens before the limit where soft_overlong starts to punish
    cosine_max_len: int = 1000  # characters, as open-r1
    repetition_n_grams: int = 3
    repetition_max_penalty: float = -1.0


DEFAULT_SHAPING = Shaping()


def _as_number(text: str) -> float | None:
    try:
        return float(text.strip().replace(",", ""))
    except (ValueError, OverflowError):
        return None


def correct_answer(text: str, answer: str, tags: Tags) -> tuple[bool, str]:
    """(is the strict pattern's answer the gold?, why in words): equal text, or equal as numbers."""
    pats = patterns_for(tags)
    found = pats.strict_search(text)
    if found is None:
        return False, f"no answer extracted ({pats.why_no_strict_match(text)})"
    guess = found.text.strip()
    gold = answer.strip()
    value = _as_number(guess)
    if guess == gold or (value is not None and value == _as_number(gold)):
        return True, f"answer {guess[:40]!r} is correct"
    return False, f"answer {guess[:40]!r} is not {gold!r}"


class _LengthReward(Reward):
    """A reward that reads the completion's token count: TRL passes `completion_ids`; without them it is
    estimated from the characters (and the reason says so)."""

    def __init__(self, tags: Tags = DEFAULT_TAGS, shaping: Shaping = DEFAULT_SHAPING):
        super().__init__(tags)
        self.shaping = shaping

    def judge(self, text: str, answer: str, n_tokens: int | None = None) -> Judgement:
        raise NotImplementedError

    def __call__(self, prompts=None, completions=(), answer="", completion_ids=None, **kwargs) -> list[float]:
        texts = [completion_text(c) for c in completions]
        counts = [len(ids) for ids in completion_ids] if completion_ids is not None else [None] * len(texts)
        return [self.judge(t, a, n).score for t, a, n in zip(texts, answers_for(answer, len(texts)), counts)]

    def __eq__(self, other) -> bool:
        return super().__eq__(other) and self.shaping == other.shaping

    def __hash__(self) -> int:
        return hash((type(self), self.tags, self.shaping))


class CosineScaled(_LengthReward):
    """Correct: 1.0 at length 0 down to 0.5 at cosine_max_len characters; wrong: -1.0 up to -0.5 (open-r1)."""

    name = "cosine_scaled"

    def judge(self, text: str, answer: str, n_tokens: int | None = None) -> Judgement:
        right, why = correct_answer(text, answer, self.tags)
        progress = min(len(text) / self.shaping.cosine_max_len, 1.0)  # open-r1 lets the cosine wrap past max_len
        cosine = math.cos(progress * math.pi)
        low, high = COSINE_CORRECT if right else (COSINE_WRONG[1], COSINE_WRONG[0])
        score = low + 0.5 * (high - low) * (1.0 + cosine)
        length = f"{len(text)} of {self.shaping.cosine_max_len} characters"
        return Judgement(score, f"{why}; {length}: {fmt(round(score, 3))}")


class SoftOverlong(_LengthReward):
    """DAPO's soft overlong punishment: 0, then linear to -1 over the last `overlong_buffer` tokens."""

    name = "soft_overlong"

    def judge(self, text: str, answer: str, n_tokens: int | None = None) -> Judgement:
        s = self.shaping
        limit, buffer = s.max_completion_length, s.overlong_buffer
        measured = f"{n_tokens} tokens"
        if n_tokens is None:
            n_tokens = math.ceil(len(text) / CHARS_PER_TOKEN)
            measured = f"~{n_tokens} tokens (estimated as characters / {CHARS_PER_TOKEN}; training counts real tokens)"
        if n_tokens <= limit - buffer:
            return Judgement(0.0, f"{measured}, within {limit - buffer}: 0")
        score = max((limit - buffer - n_tokens) / buffer, -1.0)
        return Judgement(score, f"{measured}, in the last {buffer} before the limit {limit}: {fmt(round(score, 3))}")


class RepetitionPenalty(Reward):
    """(1 - distinct word n-grams / n-grams) * max_penalty (open-r1, English word split)."""

    name = "repetition_penalty"

    def __init__(self, tags: Tags = DEFAULT_TAGS, shaping: Shaping = DEFAULT_SHAPING):
        super().__init__(tags)
        self.shaping = shaping

    def judge(self, text: str, answer: str) -> Judgement:
        n, penalty = self.shaping.repetition_n_grams, self.shaping.repetition_max_penalty
        words = text.lower().split()
        if len(words) < n:
            return Judgement(0.0, f"{len(words)} words, fewer than one {n}-gram: 0")
        grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
        share = 1 - len(set(grams)) / len(grams)
        score = share * penalty if share else 0.0  # not -0.0
        return Judgement(score, f"{share:.0%} of {len(grams)} {n}-grams repeat: {fmt(round(score, 3))}")

    def __eq__(self, other) -> bool:
        return super().__eq__(other) and self.shaping == other.shaping

    def __hash__(self) -> int:
        return hash((type(self), self.tags, self.shaping))


class FormatGated(Reward):
    """An answer-checking reward that counts only when the strict format matches; otherwise its floor."""

    def __init__(self, inner: Reward, floor: float):
        super().__init__(inner.tags)
        self.inner, self.floor = inner, floor
        self.name = self.__name__ = inner.__name__  # TRL logs rewards/<name>: the same series, gated

    def judge(self, text: str, answer: str) -> Judgement:
        pats = patterns_for(self.tags)
        if pats.strict_search(text) is None:
            return Judgement(self.floor, f"gated: format failed ({pats.why_no_strict_match(text)}): {fmt(self.floor)}")
        return self.inner.judge(text, answer)

    def __repr__(self) -> str:
        return f"FormatGated({self.inner!r}, {self.floor})"

    def __eq__(self, other) -> bool:
        return type(other) is FormatGated and (self.inner, self.floor) == (other.inner, other.floor)

    def __hash__(self) -> int:
        return hash((FormatGated, self.inner, self.floor))


def get_cosine_scaled_reward(tags: Tags = DEFAULT_TAGS, shaping: Shaping = DEFAULT_SHAPING) -> CosineScaled:
    return CosineScaled(tags, shaping)


def get_soft_overlong_reward(tags: Tags = DEFAULT_TAGS, shaping: Shaping = DEFAULT_SHAPING) -> SoftOverlong:
    return SoftOverlong(tags, shaping)


def get_repetition_penalty_reward(tags: Tags = DEFAULT_TAGS, shaping: Shaping = DEFAULT_SHAPING) -> RepetitionPenalty:
    return RepetitionPenalty(tags, shaping)
