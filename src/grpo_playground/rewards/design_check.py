"""Can this reward set be gamed? Score canonical probe completions with the current weights and compare.

The seed's own set fails: a completion with no extractable answer gets check_answer -2.0, more than a
well-formed wrong one (-2.5). A small model trained with it learned within ~25 GRPO steps to keep writing
after `</SOLUTION>` until the length limit (truncated completions 0% -> 99%). The check works for any
weights because it scores the probes with the same `score_group` the sandbox and training use.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from grpo_playground.contracts.findings import Finding
from grpo_playground.rewards.group import score_group
from grpo_playground.rewards.registry import DEFAULT_WEIGHTS, REWARDS, validate_weights
from grpo_playground.rewards.shaping import DEFAULT_SHAPING, Shaping
from grpo_playground.tags import DEFAULT_TAGS, Tags

PROBE_GOLD = "42"
# A near miss earning more than this share of the exact answer's lead over a wrong one pulls a weak
# policy toward near misses (measured: exact accuracy fell while the reward rose).
NEAR_MISS_SHARE = 0.5


@dataclass(frozen=True)
class Probe:
    key: str
    description: str
    template: str  # {rs} {re} {ss} {se} are the four tags
    gives_answer: bool

    def text(self, tags: Tags) -> str:
        return self.template.format(
            rs=tags.reasoning_start, re=tags.reasoning_end, ss=tags.solution_start, se=tags.solution_end
        )


PROBES = [
    Probe("correct", "a well-formed correct answer", "{rs}6 x 7 = 42{re}{ss}42{se}", True),
    Probe("correct_with_unit", "a correct answer written with its unit (42 apples)",
          "{rs}6 x 7 = 42 apples{re}{ss}42 apples{se}", True),
    Probe("near_miss", "a well-formed near miss (41 for 42)", "{rs}6 x 7 = 41{re}{ss}41{se}", True),
    Probe("wrong", "a well-formed wrong answer", "{rs}6 + 7 = 13{re}{ss}13{se}", True),
    # the same wrong answer padded with a repeated phrase: what a length reward that pays wrong answers for
    # thinking longer (cosine_scaled) invites, and what repetition_penalty exists to stop
    Probe("padded_wrong", "the same wrong answer padded with a repeated phrase",
          "{rs}6 + 7 = 13." + " Let me check that again." * 30 + "{re}{ss}13{se}", True),
    Probe("not_a_number", "a well-formed answer that is not a number", "{rs}six and seven{re}{ss}thirteen{se}", True),
    Probe(
        "runs_on", "keeps writing after the closing tag until the length limit",
        "{rs}6 + 7 = 13{re}{ss}13{se} Let me double-check: 6 + 7 is 13, and then", False,
    ),
    Probe("unclosed", "is truncated before closing the solution tag", "{rs}6 + 7 = 13{re}{ss}13, and then we need", False),
    Probe("no_tags", "writes the answer without the tags", "6 + 7 = 13, so the solution is 13", False),
    Probe("empty", "is empty", "", False),
]


@dataclass
class DesignReport:
    totals: dict[str, float]  # probe key -> weighted total
    findings: list[Finding]

    @property
    def ok(self) -> bool:
        checked = not any(math.isnan(t) for t in self.totals.values())
        return checked and not any(f.severity == "warning" for f in self.findings)


def probe_totals(weights: Mapping[str, float], tags: Tags, shaping: Shaping = DEFAULT_SHAPING) -> dict[str, float]:
    group = score_group([p.text(tags) for p in PROBES], PROBE_GOLD, weights, tags, shaping=shaping)
    return {p.key: c.total for p, c in zip(PROBES, group.completions)}


def _gaming_probes(totals: dict[str, float]) -> list[Probe]:
    return [p for p in PROBES if not p.gives_answer and totals[p.key] >= totals["wrong"]]


def check_design(
    weights: Mapping[str, float] = DEFAULT_WEIGHTS, tags: Tags = DEFAULT_TAGS, shaping: Shaping = DEFAULT_SHAPING
) -> DesignReport:
    weights = validate_weights(weights)
    totals = probe_totals(weights, tags, shaping)
    if any(math.isnan(t) for t in totals.values()):  # math-verify could not score a probe now (busy checkers)
        return DesignReport(totals, [Finding("info", "The reward design check could not run now: math-verify "
                                                     "(answer_equivalence) did not answer in time. Score again.")])
    findings = []
    gamed = _gaming_probes(totals)
    for p in gamed:
        findings.append(Finding("warning", (
            f"A completion that {p.description} totals {totals[p.key]:g}, not less than a well-formed wrong answer "
            f"({totals['wrong']:g}): GRPO can raise the reward by never giving a clean answer. With the seed's set "
            "a small model learned this within ~25 steps (truncated completions 0% -> 99%)."
        )))
    if gamed:
        findings.append(Finding("warning", _suggest_fix(weights, tags, shaping)))
    if totals["padded_wrong"] > totals["wrong"]:
        findings.append(Finding("warning", (
            f"A wrong answer padded with a repeated phrase totals {totals['padded_wrong']:g}, more than the same "
            f"wrong answer said briefly ({totals['wrong']:g}): GRPO can raise the reward by padding until truncation "
            "cuts off the answer. Fix: enable repetition_penalty (or raise its weight), or soft_overlong."
        )))
    if not any(REWARDS[n].checks_answer and w > 0 for n, w in weights.items()):
        findings.append(Finding("warning", "No enabled reward checks the answer: GRPO can only learn the format."))
    if totals["correct_with_unit"] < totals["wrong"]:
        findings.append(Finding("warning", (
            f"A correct answer written with its unit ('42 apples' for 42) totals "
            f"{totals['correct_with_unit']:g}, below a wrong number ({totals['wrong']:g}): GRPO punishes being right "
            "in words. Fix: enable check_numbers (it reads the number inside the answer) or give it more weight, and "
            "ask for the number alone in the system prompt."
        )))
    beaten = [p for p in PROBES if p.key not in ("correct", "correct_with_unit") and totals[p.key] >= totals["correct"]]
    if beaten and len(set(totals.values())) > 1:
        findings.append(Finding("warning", "The correct answer is not the best-scoring completion: "
                                + "; ".join(f"{p.description} totals {totals[p.key]:g}" for p in beaten)
                                + f" vs {totals['correct']:g} for the correct one."))
    if len(set(totals.values())) == 1:
        findings.append(Finding("warning", f"Every probe totals {totals['correct']:g}: this set cannot tell "
                                           "completions apart, so every group has zero variance."))
    lead = totals["correct"] - totals["wrong"]
    if lead > 0 and (totals["near_miss"] - totals["wrong"]) / lead > NEAR_MISS_SHARE:
        share = (totals["near_miss"] - totals["wrong"]) / lead
        findings.append(Finding("info", (
            f"A near miss earns {share:.0%} of the correct answer's lead over a wrong one: from a weak policy "
            "GRPO drifted toward near misses while exact accuracy fell."
        )))
    if "check_answer" in weights and "check_answer_strict_nomatch" in weights:
        findings.append(Finding("info", "check_answer and check_answer_strict_nomatch are both on: they count "
                                        "the same answer twice; keep one."))
    return DesignReport(totals, findings)


def _suggest_fix(weights: dict[str, float], tags: Tags, shaping: Shaping) -> str:
    """Name a registered change that removes the incentive, and say whether it does for these weights."""
    gate = ""
    gated = replace(shaping, gate_on_format=True)
    if not shaping.gate_on_format and not _gaming_probes(probe_totals(weights, tags, gated)):
        gate = (" Or turn on rewards.gate_on_format: answer checks then count only when the format passes, "
                "and score their lowest value otherwise.")
    if "check_answer" in weights and "check_answer_strict_nomatch" not in weights:
        fixed = {("check_answer_strict_nomatch" if n == "check_answer" else n): w for n, w in weights.items()}
        change = "replace check_answer with check_answer_strict_nomatch (no match -3.0, below any wrong answer)"
    else:
        fixed = {**weights, "match_format_exactly": weights.get("match_format_exactly", 0.0) + 1.0}
        change = "add match_format_exactly (or raise its weight by 1)"
    still = _gaming_probes(probe_totals(fixed, tags, shaping))
    if not still:
        return f"Fix: {change}; with that change every such completion scores below a wrong answer.{gate}"
    return (f"Try: {change}; with these weights it is not enough alone ({still[0].description} still ties or wins)."
            + gate)
