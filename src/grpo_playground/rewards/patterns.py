"""The seed's two patterns for any tag set, matched in linear time, and plain-words reasons when the strict one misses.

The seed writes them as regexes (Unsloth Qwen3 GRPO notebook, multiline + dotall):

    strict:  {reasoning_end}.*?{solution_start}(.+?){solution_end}[\\s]{0,}$
    numbers: {solution_start}.*?[\\s]{0,}([-]?[\\d\\.\\,]{1,})

A backtracking engine runs the strict one in cubic time on text full of repeated tags (one-letter tags and
`"abb" * 1039` kept a 0.25 s timeout busy per completion, 20 s per request). Here the tags are literals found
with `str.find`, so each search is linear and gives exactly the match the regex gives (tests/test_rewards_guard.py
compares both on random texts): the strict match starts at the first reasoning_end; its answer opens at the first
solution_start after it that leaves room for a non-empty answer before the last *closing* solution_end (one that
only whitespace follows to the end of its line), and ends at the first closing solution_end after that.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import regex

from grpo_playground.tags import Tags

# What the seed's `[\s]{0,}` and `[-]?[\d\.\,]{1,}` accept (the `regex` package's Unicode classes, as the seed
# used). Neither can backtrack: one character class each, and a failed start costs one character.
_SPACES = regex.compile(r"[\s]*")
_NUMBER = regex.compile(r"[-]?[\d\.\,]+")


@dataclass(frozen=True)
class Capture:
    """What a pattern captured: its text and where it lies in the completion."""

    text: str
    start: int
    end: int


def completion_text(completion) -> str:
    """The text of one completion: TRL's chat format `[{"role": "assistant", "content": ...}]` or a string (a
    conversational prompt's messages come out joined)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and all(isinstance(m, dict) for m in completion):
        contents = [m.get("content") for m in completion]
        if all(isinstance(c, str) for c in contents):
            return "".join(contents)
    if isinstance(completion, dict) and isinstance(completion.get("content"), str):
        return completion["content"]
    raise TypeError(
        f"a completion must be a string or [{{'role': 'assistant', 'content': str}}], got {type(completion).__name__}"
    )


@dataclass(frozen=True)
class TagPatterns:
    tags: Tags

    def strict_search(self, text: str) -> Capture | None:
        """The seed's strict pattern: the answer between solution_start and a solution_end that ends its line,
        after reasoning_end; None when it does not match."""
        t = self.tags
        start = text.find(t.reasoning_end)
        if start < 0:
            return None
        last = self._last_closer(text)
        if last is None:
            return None
        # the first opening tag after reasoning_end that leaves at least one answer character before `last`
        opened = text.find(t.solution_start, start + len(t.reasoning_end), max(last - 1, 0))
        if opened < 0:
            return None
        answer_start = opened + len(t.solution_start)
        close = text.find(t.solution_end, answer_start + 1)
        while not _ends_line(text, close + len(t.solution_end)):  # `last` closes, so this stops there at the latest
            close = text.find(t.solution_end, close + 1)
        return Capture(text[answer_start:close], answer_start, close)

    def _last_closer(self, text: str) -> int | None:
        """Start of the last solution_end that only whitespace follows to the end of its line."""
        tag = self.tags.solution_end
        at = text.rfind(tag)
        while at >= 0 and not _ends_line(text, at + len(tag)):
            at = text.rfind(tag, 0, at + len(tag) - 1)  # the next occurrence to the left, overlapping ones included
        return at if at >= 0 else None

    def number_search(self, text: str) -> Capture | None:
        """The seed's number pattern: the first number (a run of digits, dots and commas, with its minus sign)
        after the first solution_start; None when there is none."""
        opened = text.find(self.tags.solution_start)
        if opened < 0:
            return None
        found = _NUMBER.search(text, opened + len(self.tags.solution_start))
        return Capture(found.group(), *found.span()) if found else None

    def why_no_strict_match(self, text: str) -> str:
        """Plain-words reason the strict pattern found nothing (the most common cause first)."""
        t = self.tags
        if not text.strip():
            return "empty completion"
        start = text.rfind(t.solution_start)
        if start < 0:
            lowered = text.lower()
            if t.solution_start.lower() in lowered:
                return f"no {t.solution_start}: the tag appears with different capitals"
            # The seed's flat -2.0: the model wrote "solution" or "SOLUTION:" but never the tag itself.
            word = "".join(ch for ch in t.solution_start if ch.isalnum())
            at = lowered.find(word.lower()) if word else -1
            if at >= 0:
                return f"no {t.solution_start} tag: the model wrote {text[at:at + len(word)]!r} instead"
            return f"no {t.solution_start} tag"
        after = text[start + len(t.solution_start):]
        if t.solution_end not in after:
            return f"truncated: {t.solution_start} never closed (no {t.solution_end} after it)"
        if t.reasoning_end not in text[:start]:
            return f"no {t.reasoning_end} before {t.solution_start}"
        tail = after[after.rfind(t.solution_end) + len(t.solution_end):]
        if tail.strip():
            return (
                f"text after {t.solution_end} on the same line ({tail.strip()[:30]!r}...): "
                "the strict pattern wants the line to end there"
            )
        if after.startswith(t.solution_end):
            return f"nothing between {t.solution_start} and {t.solution_end}"
        return "the strict pattern did not match"


def _ends_line(text: str, pos: int) -> bool:
    """`[\\s]{0,}$` in multiline mode matches at pos: the whitespace run there reaches the end or holds a newline."""
    run_end = _SPACES.match(text, pos).end()
    return run_end == len(text) or text.find("\n", pos, run_end) >= 0


@lru_cache(maxsize=64)
def patterns_for(tags: Tags) -> TagPatterns:
    return TagPatterns(tags)
