"""The seed's two regexes built for any tag set, and plain-words reasons when the strict one misses.

Tags are escaped before they enter a pattern, so a tag such as `[ANS]` or `(*)` is matched literally.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import regex

from grpo_playground.rewards.guard import FLAGS, SearchResult, bounded_search
from grpo_playground.tags import Tags


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
    strict: regex.Pattern
    numbers: regex.Pattern

    def strict_search(self, text: str) -> SearchResult:
        return bounded_search(self.strict, text)

    def number_search(self, text: str) -> SearchResult:
        return bounded_search(self.numbers, text)

    def why_no_strict_match(self, text: str, result: SearchResult) -> str:
        """Plain-words reason the strict pattern found nothing (the most common cause first)."""
        t = self.tags
        if result.timed_out:
            return "the strict pattern gave up (too many repeated tags to search in time): counted as no match"
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


@lru_cache(maxsize=64)
def patterns_for(tags: Tags) -> TagPatterns:
    re_, ss, se = (regex.escape(x) for x in (tags.reasoning_end, tags.solution_start, tags.solution_end))
    # The seed's patterns verbatim (Unsloth Qwen3 GRPO notebook), multiline + dotall.
    strict = regex.compile(rf"{re_}.*?{ss}(.+?){se}[\s]{{0,}}$", FLAGS)
    numbers = regex.compile(ss + r".*?[\s]{0,}([-]?[\d\.\,]{1,})", FLAGS)
    return TagPatterns(tags, strict, numbers)
