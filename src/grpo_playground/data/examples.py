"""The one normalized example form every source is turned into (docs/ARCHITECTURE.md, "Data").

A row is a dict because it is what TRL sees as a dataset row: `prompt` (chat messages), `answer` (plain number
string, passed to the reward functions as the `answer` keyword), and for SFT `completion` (the worked solution
wrapped in the recipe's tags). `problem`, `level` and `source` ride along for evaluation and display.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from grpo_playground.tags import DEFAULT_TAGS, Tags, system_prompt


def format_completion(reasoning: str, answer: str, tags: Tags = DEFAULT_TAGS) -> str:
    """The recipe's target text: reasoning between the working-out tags, then the answer between SOLUTION tags."""
    return f"{tags.reasoning_start}{reasoning.strip()}{tags.reasoning_end}{tags.solution_start}{answer}{tags.solution_end}"


def make_example(
    problem: str,
    answer: str,
    source: str,
    tags: Tags = DEFAULT_TAGS,
    completion: str | None = None,
    level: int | None = None,
) -> dict:
    """One normalized row. `completion` is the full tagged assistant text (SFT only), or None for GRPO/eval."""
    row = {
        "prompt": [
            {"role": "system", "content": system_prompt(tags)},
            {"role": "user", "content": problem.strip()},
        ],
        "answer": answer,
        "problem": problem.strip(),
        "level": level,
        "source": source,
    }
    if completion is not None:
        row["completion"] = [{"role": "assistant", "content": completion}]
    return row


@dataclass
class LoadResult:
    """Examples that normalized, and the rows that did not, counted by reason (never silently dropped)."""

    examples: list[dict]
    skipped: dict[str, int] = field(default_factory=dict)
    rows_seen: int = 0

    def summary(self) -> str:
        kept = f"{len(self.examples)} examples from {self.rows_seen} rows"
        if not self.skipped:
            return kept
        reasons = ", ".join(f"{reason}: {count}" for reason, count in Counter(self.skipped).most_common())
        return f"{kept}; skipped {sum(self.skipped.values())} ({reasons})"
