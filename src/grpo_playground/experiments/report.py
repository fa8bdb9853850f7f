"""What a comparison's numbers say: paired differences, the template split, the copy rate, the reward curve, and
the Markdown report written beside the result JSON."""

from __future__ import annotations

import re
from pathlib import Path

from grpo_playground.experiments.progress import SCORED, TUNED
from grpo_playground.contracts.layout import METRICS_FILE
from grpo_playground.contracts.metrics import read_records


def paired_difference(a: dict, b: dict) -> dict:
    """Accuracy of a minus b on the same prompts, with the standard error of the paired difference."""
    diffs = [int(x["correct"]) - int(y["correct"]) for x, y in zip(a["completions"], b["completions"])]
    n = len(diffs)
    mean = sum(diffs) / n
    var = sum((d - mean) ** 2 for d in diffs) / (n - 1)
    return {"difference": round(mean, 4), "se": round((var / n) ** 0.5, 4), "n": n}


def pct(summary: dict, key: str) -> str:
    value, se = summary.get(key), summary.get(f"{key}_se")
    return "n/a" if value is None else f"{100 * value:.1f} ± {100 * (se or 0):.1f}"


def level_table(evals: dict) -> list[str]:
    """Markdown lines of accuracy by level, one column per evaluated checkpoint (none when no level is known)."""
    levels = sorted({lv for name in evals for lv in (evals[name].get("per_level") or {})}, key=int)
    if not levels:
        return []
    lines = ["", "Accuracy by level (%):", "", "| level | " + " | ".join(evals) + " |", "|---" * (len(evals) + 1) + "|"]
    for lv in levels:
        cells = [f"{100 * evals[name]['per_level'][lv]['accuracy']:.1f}" if lv in (evals[name].get("per_level") or {})
                 else "-" for name in evals]
        lines.append(f"| {lv} | " + " | ".join(cells) + " |")
    return lines


def template(problem: str) -> str:
    """A problem with its numbers and capitalised words masked: generated problems that differ only in their
    numbers and names share a template."""
    return re.sub(r"\b[A-Z][a-z]+\b", "X", re.sub(r"\d+(?:\.\d+)?", "N", problem))


def template_split(worked: list[str], full: dict[str, dict]) -> dict:
    """Each arm's accuracy on the held-out prompts whose template occurs in W and on the rest, with GRPO's paired
    differences on each part: does an arm gain by recalling W's templates, or beyond them?"""
    seen = {template(p) for p in worked}
    covered = [template(c["problem"]) in seen for c in full["sft_w"]["completions"]]
    split = {}
    for part, keep in (("template_in_w", True), ("template_not_in_w", False)):
        evals = {arm: {"completions": [c for c, k in zip(f["completions"], covered) if k == keep]}
                 for arm, f in full.items()}
        n = len(evals["sft_w"]["completions"])
        split[part] = {"n": n, "accuracy": {arm: sum(c["correct"] for c in e["completions"]) / n if n else None
                                            for arm, e in evals.items()},
                       "grpo_minus": {arm: paired_difference(evals["sft_w+grpo_a"], e) if n > 1 else None
                                      for arm, e in evals.items() if arm != "sft_w+grpo_a"}}
    return split


def reward_curve(run_dir: Path, parts: int = 4) -> dict:
    """GRPO's mean check_answer reward, total reward and zero-variance group fraction over each quarter of its
    steps (from metrics.jsonl): has the reward flattened?"""
    rows = [r for r in read_records(run_dir / METRICS_FILE) if "reward" in r]
    curve = {}
    for key in ("rewards/check_answer/mean", "reward", "frac_reward_zero_std"):
        values = [r[key] for r in rows if r.get(key) is not None]
        chunks = [values[i * len(values) // parts:(i + 1) * len(values) // parts] for i in range(parts)]
        curve[key] = [round(sum(c) / len(c), 3) if c else None for c in chunks]
    return curve


def copy_rate(completions: list[dict], reasoning_end: str = "<end_working_out>") -> dict:
    """Of the completions in format, how often `<SOLUTION>` repeats the reasoning's last number (the copy), and how
    often that last number is the gold answer: a model that reasons right but copies wrong earns no check_answer."""
    from grpo_playground.data.answers import normalize_number

    shaped = [c for c in completions if c.get("in_format")]
    last = [re.findall(r"-?\d+(?:\.\d+)?", c["text"].split(reasoning_end)[0].replace(",", "")) for c in shaped]
    last = [normalize_number(x[-1]) if x else None for x in last]
    n = len(shaped)
    return {"n_in_format": n,
            "copied": share([x is not None and x == normalize_number(c["guess"] or "") for x, c in zip(last, shaped)]),
            "last_is_gold": share([x is not None and x == normalize_number(c["answer"]) for x, c in zip(last, shaped)])}


def share(hits: list[bool]) -> float | None:
    """The fraction of hits, to 4 places; None for no item."""
    return round(sum(hits) / len(hits), 4) if hits else None


def column(full: dict[str, dict], worked: list[str]) -> dict:
    """One held-out source's numbers: each arm's summary (with its copy rate), GRPO's paired differences, the
    template split."""
    return {"eval": {arm: {**{k: v for k, v in f.items() if k not in ("completions", "example_prompt")},
                           "copy": copy_rate(f["completions"])} for arm, f in full.items()},
            "grpo_minus": {arm: paired_difference(full["sft_w+grpo_a"], f) for arm, f in full.items()
                           if arm != "sft_w+grpo_a"},
            "by_template": template_split(worked, full)}


def versions() -> dict:
    import platform
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("torch", "transformers", "trl", "peft", "vllm"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:  # vllm: GPU machines only
            pass
    return {"python": platform.python_version(), **found}


def report(r: dict) -> str:
    e, sft = r["eval"], r["sft_w"]
    arms = [arm for arm in SCORED if arm in e]
    n = r["sets"]
    lines = [
        "# GRPO in the seed's data regime: few worked solutions, many answer-only problems", "",
        f"Command: `{r['command']}` (recipe `{r['recipe']}`; base weights sha256 {r['model_sha256'][:16]}...; "
        + ", ".join(f"{k} {v}" for k, v in r["versions"].items()) + ").", "",
        f"Data: W = {n['worked']} worked problems of `{r['sources']['worked']}`; A = {n['answers']} answer-only "
        f"problems of `{r['sources']['answers']}`; fresh = {n['fresh']} other worked problems; none of them among the "
        f"{n['held_out']} held-out `{r['sources']['eval']}`"
        + (f" and `{r['sources']['eval_2']}`" if r["sources"].get("eval_2") else "")
        + f" prompts (seed {r['sources']['eval_seed']}), A none of W"
        + (f", {n['pilot']} problems of A's source held out as the pilot slice" if n.get("pilot") else "") + ".", "",
        f"sft-W: {sft['steps']} steps in {len(sft['rounds'])} round(s), {sft['train_seconds']:.0f} s of training "
        "(format checks not counted); sampled format rate after each round: "
        + ", ".join(f"{100 * x['format_rate']:.0f}%" for x in sft["rounds"])
        + f" (target {100 * r['format_target']:.0f}%{'' if sft['format_target_met'] else ', NOT reached'}; "
        f"{r['sampled_format']['prompts']} prompts x "
        f"{r['sampled_format']['completions_each']} completions at temperature "
        f"{r['sampled_format']['temperature']}).", "",
        f"Each arm after sft-W trained T = {r['minutes']:g} min (the SFT continuations for GRPO's measured time, lr "
        f"{r['control']['learning_rate']:g} {r['control']['schedule']}). Greedy evaluation "
        f"({r.get('eval_backend', 'transformers')}) on the same held-out prompts, ± one standard error:", "",
        "| arm | train time | steps | format rate % | accuracy % |", "|---|---|---|---|---|",
    ]
    second = r.get("second_eval") or []
    if second:  # one accuracy column per held-out source
        lines[-2:] = ["| arm | train time | steps | format rate % | accuracy % | "
                      + " | ".join(f"accuracy % on `{c['source']}`" for c in second) + " |",
                      "|---|---|---|---|---|" + "---|" * len(second)]
    for arm in arms:
        lines.append(f"| {arm} | {'' if arm == 'sft_w' else '+'}{r['seconds'][arm]:.0f} s | {r['steps'][arm]} | "
                     f"{pct(e[arm], 'format_rate')} | {pct(e[arm], 'accuracy')} |"
                     + "".join(f" {pct(c['eval'][arm], 'accuracy')} |" for c in second))
    for source, minus in ((r["sources"]["eval"], r["grpo_minus"]), *((c["source"], c["grpo_minus"]) for c in second)):
        lines += ["", f"sft-W + grpo-A minus each other arm on `{source}`, paired on the same prompts "
                  "(accuracy points):", ""]
        for arm, d in minus.items():
            lines.append(f"- minus {arm}: {100 * d['difference']:+.1f} ± {100 * d['se']:.1f}")
    if r.get("start_sha256"):
        same = set(r["start_sha256"].values()) == {r["sft_w_sha256"]}
        lines += ["", f"Every arm started from sft-W's adapter sha256 {r['sft_w_sha256'][:16]}... "
                  f"({'checked at each arm' if same else 'NOT the same for every arm: ' + str(r['start_sha256'])})."]
    if r.get("reward_curve"):
        lines += ["", "GRPO arm by quarter of its steps: " + "; ".join(
            f"{key} " + arrows(values)
            for key, values in r["reward_curve"].items())]
    if r.get("pilots"):
        pl = r["pilots"]
        lines += ["", f"Pilots ({pl['minutes']:g} min of GRPO each from sft-W on A, greedy on the {pl['n']} pilot "
                  f"problems held out from A; chosen: `{pl['chosen']}`):", "",
                  "| pilot | settings | steps | check_answer by quarter | zero-std groups | pilot accuracy % "
                  "| minus chosen |",
                  "|---|---|---|---|---|---|---|"]
        for run in pl["runs"]:
            if "failed" in run:  # diverged or crashed: its answer is that it failed
                lines.append(f"| {run['name']} | {', '.join(run['overrides']) or 'the recipe'} | failed: "
                             f"{run['failed'][:120]} | - | - | - | - |")
                continue
            d = run["minus_chosen"]
            lines.append(f"| {run['name']} | {', '.join(run['overrides']) or 'the recipe'} | {run['steps']} | "
                         + arrows(run["reward"]["rewards/check_answer/mean"])
                         + " | " + arrows(run["reward"]["frac_reward_zero_std"])
                         + f" | {100 * run['accuracy']:.1f} ± {100 * run['accuracy_se']:.1f} | "
                         + ("chosen" if d is None else f"{100 * d['difference']:+.1f} ± {100 * d['se']:.1f}") + " |")
    if r.get("control_tuned"):
        t = r["control_tuned"]
        lines += ["", f"Tuned control ({TUNED}): the more-SFT arm's checkpoints scored greedily on the {t['n']} pilot "
                  f"problems, as GRPO's pilots are; chosen: `{t['chosen']}` (step {t['step']}):", "",
                  "| checkpoint | step | pilot accuracy % |", "|---|---|---|"]
        lines += [f"| {c['name']} | {c['step']} | {100 * c['accuracy']:.1f} ± {100 * c['accuracy_se']:.1f} |"
                  for c in t["candidates"]]
    lines += level_table({arm: e[arm] for arm in arms})
    if "by_template" in r:
        lines += ["", "Accuracy (%) on held-out prompts whose template (numbers and capitalised words masked) occurs "
                  "in W, and on the rest; GRPO minus each arm, paired, in points:", "",
                  "| held-out prompts | n | " + " | ".join(arms) + " | " + " | ".join(
                      f"grpo minus {arm}" for arm in arms if arm != "sft_w+grpo_a") + " |",
                  "|---|---|" + "---|" * (2 * len(arms) - 1)]
        for part, d in r["by_template"].items():
            if not d["n"]:
                continue
            diffs = [d["grpo_minus"][arm] for arm in arms if arm != "sft_w+grpo_a"]
            lines.append(f"| {part.replace('_', ' ').replace(' w', ' W')} | {d['n']} | "
                         + " | ".join(f"{100 * d['accuracy'][arm]:.1f}" for arm in arms) + " | "
                         + " | ".join(f"{100 * x['difference']:+.1f} ± {100 * x['se']:.1f}" if x else "-"
                                      for x in diffs)
                         + " |")
    return "\n".join(lines) + "\n"


def arrows(values: list) -> str:
    """Values by quarter as "a -> b -> c -> d" ("-" for a quarter without one)."""
    return " -> ".join("-" if v is None else f"{v:g}" for v in values)
