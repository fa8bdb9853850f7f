"""The Chat tab's score table: what each finished reply's SOLUTION tags hold and, given the gold answer, each chosen
reward. A reply is scored once, when it finishes (the table is redrawn many times a second while others stream),
through the sandbox's bounded path: the gold answer checked the same way, one math-verify budget for the whole
question (rewards.scoring_request).
"""

from __future__ import annotations

from grpo_playground.data.answers import normalize_number
from grpo_playground.rewards.grading import grade_completion
from grpo_playground.rewards import DEFAULT_WEIGHTS, RewardInputError, score_group
from grpo_playground.rewards.equivalence import VISITOR
from grpo_playground.rewards.group import explain_extraction, score_text
from grpo_playground.rewards.scoring_request import check_gold, request_deadline_from_now, scoring_request
from grpo_playground.tags import DEFAULT_TAGS, Tags


class ReplyScores:
    """The table of one question's replies; `add` scores a finished reply, `markdown` draws what was scored."""

    def __init__(self, gold: str, rewards: list[str], visitor: str = "unknown"):
        self.names = list(rewards or [])
        self.visitor = visitor  # whose math-verify questions these are (equivalence.VISITOR)
        self.gold, self.gold_problem = (gold or "").strip(), None
        if self.gold:
            try:
                self.gold = check_gold(self.gold)
            except RewardInputError as error:
                self.gold_problem = str(error)
        self.deadline = request_deadline_from_now()
        self.rows: dict[int, list[str]] = {}

    def add(self, slot: int, label: str, reply: str, settings: tuple[Tags, dict[str, float]] | None = None) -> None:
        """Score one finished reply with its checkpoint's tags and reward weights (`settings`; default: the defaults)."""
        tags, run_weights = settings or (DEFAULT_TAGS, DEFAULT_WEIGHTS)
        weights = {name: run_weights.get(name, DEFAULT_WEIGHTS.get(name, 1.0)) for name in self.names}
        strict, number, _, _ = explain_extraction(reply, tags)
        solution = strict if strict is not None else (f"(no strict match; first number: {number})" if number else "(none)")
        row = [label, solution.replace("|", "\\|").replace("\n", " ")[:200]]
        if self.gold and not self.gold_problem:  # plain words, as the Evaluate tab counts it: in format and equal
            row.append("✓ right" if grade_completion(reply, normalize_number(self.gold) or self.gold, tags).correct
                       else "✗ wrong")
        elif self.gold:
            row.append("-")
        if self.gold and weights:
            try:
                if self.gold_problem:
                    raise RewardInputError(self.gold_problem)
                visitor = VISITOR.set(self.visitor)
                try:
                    with scoring_request(len(reply), self.deadline):
                        scored = score_group([reply], self.gold, weights, tags, scale="none").completions[0]
                finally:
                    VISITOR.reset(visitor)
                row += [score_text(scored.scores[n], "g") for n in weights] + [f"**{score_text(scored.total, 'g')}**"]
            except (RewardInputError, ValueError) as error:
                row += ["-"] * len(weights) + [f"cannot score: {error}"]
        self.rows[slot] = row

    def markdown(self) -> str:
        if not self.rows:
            return ""
        head = ["checkpoint", "SOLUTION content"] + (["answer"] if self.gold else []) + (
            self.names + ["total"] if self.gold and self.names else [])
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(self.rows[slot]) + " |" for slot in sorted(self.rows)]
        if not self.gold:
            lines.append("\nGive the gold answer to score the replies with the rewards.")
        return "\n".join(lines)

