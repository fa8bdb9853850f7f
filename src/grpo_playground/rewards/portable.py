"""The recipe's rewards where another trainer calls them: verl's `compute_score` and OpenRLHF's `reward_func`.

A run that outgrows one GPU moves to verl or OpenRLHF (`grpo-playground scale-out`). Its reward must not change on
the way, or the curves there say nothing about the run here: these are the functions GRPO trains with in the
Playground (`registry.get_reward_funcs`, the recipe's tags and weights), called with each framework's arguments.

- verl 0.9.1 (its naive reward manager): `compute_score(data_source, solution_str, ground_truth, extra_info)` once
  per response; `solution_str` is the response alone, decoded without special tokens. A dict return's "score" is
  the reward and every other key is logged, so each reward function's own score shows in verl's metrics.
- OpenRLHF 0.11.2 (`--reward.remote_url reward.py`): `reward_func(queries, prompts, labels)`; a query is the prompt
  and the response decoded WITH special tokens, so the prompt is cut off and the end-of-turn marker the model wrote
  last is dropped (the strict pattern wants `</SOLUTION>` at the end of a line). It returns torch tensors.

Pure Python apart from that last step (torch is imported only for OpenRLHF's tensors).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from grpo_playground.rewards.patterns import completion_text
from grpo_playground.rewards.registry import get_reward_funcs
from grpo_playground.rewards.shaping import DEFAULT_SHAPING, Shaping
from grpo_playground.tags import Tags


@dataclass(frozen=True)
class PortableRewards:
    weights: Mapping[str, float]
    tags: Tags = field(default_factory=Tags)
    end_markers: tuple[str, ...] = ()  # what the model's template writes after a reply, e.g. "<|im_end|>"
    # the recipe's format gate and shaped rewards' knobs; neither framework passes token ids to these calls, so
    # soft_overlong estimates a response's tokens from its characters there
    shaping: Shaping = DEFAULT_SHAPING

    def __post_init__(self) -> None:
        funcs, weights = get_reward_funcs(self.weights, self.tags, self.shaping)  # bad names and weights fail here
        object.__setattr__(self, "_funcs", list(zip(funcs, weights)))

    def score(self, response: str, gold) -> dict[str, float]:
        """{"score": the weighted total GRPO sums, then each reward function's own score}."""
        text, answer = completion_text(response), str(gold)
        scores = {f.__name__: f.judge(text, answer).score for f, _ in self._funcs}
        return {"score": sum(w * scores[f.__name__] for f, w in self._funcs), **scores}

    def response(self, query: str, prompt: str) -> str:
        """OpenRLHF's query without its prompt and without the end-of-turn marker (and padding) after the reply."""
        text = (query[len(prompt):] if query.startswith(prompt) else query).rstrip()
        while marker := next((m for m in self.end_markers if m and text.endswith(m)), None):
            text = text[: -len(marker)].rstrip()
        return text

    def openrlhf(self, queries: Sequence[str], prompts: Sequence[str], labels: Sequence) -> dict:
        import torch

        rows = [self.score(self.response(q, p), gold) for q, p, gold in zip(queries, prompts, labels, strict=True)]
        totals = torch.tensor([r["score"] for r in rows], dtype=torch.float32)
        logs = {f.__name__: torch.tensor([r[f.__name__] for r in rows], dtype=torch.float32) for f, _ in self._funcs}
        return {"rewards": totals, "scores": totals, "extra_logs": logs}
