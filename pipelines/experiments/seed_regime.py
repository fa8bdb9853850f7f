"""GRPO in the seed's own data regime: worked solutions are scarce, final answers plentiful. Does GRPO on
answer-only problems beat spending the same time on more SFT over the few worked ones?

    OMP_NUM_THREADS=1 python -m pipelines.experiments.seed_regime [--recipe recipes/tiny-cpu.yaml] \
        [--worked generator:train] [--answers generator:train] [--eval-data generator:test] \
        [--n-worked 200] [--n-answers 4000] [--n-eval 600] [--minutes 10] \
        [--eval-backend transformers|vllm] [--only-sft-w] [--work runs/seed_regime] [--out results/learning_seed_regime_cpu] \
        [--set SECTION.KEY=VALUE ...]

With the seed's datasets (files on disk, any of .jsonl/.json/.csv/.parquet):
    --worked openmath:OpenMathReasoning-mini.parquet --answers dapo:DAPO-Math-17k.parquet --eval-data gsm8k:test.jsonl

Every step runs the product's own CLIs as child processes, one after another (a rerun with the same --work, as the
app's Resume comparison does, skips finished steps and starts an interrupted one over):
  0. data, written to <work>/data/ in the seed's own schemas: W = the first --n-worked worked problems of --worked
     (`worked.jsonl`, openmath columns); A = --n-answers problems of --answers with their final answer only
     (`answers.jsonl`, dapo columns: GRPO never sees a solution); both without any of the --n-eval held-out
     prompts, and A without W's problems;
  1. sft-W: SFT on W in rounds of --round-steps steps (each round continues the last adapter, lr warming up once
     and falling linearly to 0 within each round), a pre-flight after each round samples the held-out prompts
     (grpo.num_generations completions each, at grpo.temperature) until the format rate reaches --format-target
     (at most --max-rounds rounds: then the arms start from the last one and the report says the target was missed);
  2. sft-W + grpo-A: GRPO from the sft-W adapter on A for --minutes;
  3. sft-W + more sft-W (the fair control): SFT continued on W for GRPO's measured wall time, lr falling linearly
     from --control-lr (default a tenth of the recipe's SFT rate) to 0 over the steps that fit at step 1's pace;
  4. sft-W + fresh worked SFT: the same as 3 on worked problems of --worked that are not in W (`fresh.jsonl`):
     the "if gold reasoning were free" row, reported, not a target;
  5. greedy evaluation (`python -m pipelines.eval`) of the four checkpoints on the same --n-eval prompts; GRPO's
     paired differences (with standard errors) against each other arm.
Writes <out>.json (every number) and <out>.md (tables, the command, versions). While it runs, <work>/progress.json
says which step runs (data, sft_w, one per arm, eval) and the run folder it trains in, so the app can show progress.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import time
from pathlib import Path

from grpo_playground.cli.args import CompareArgs
from grpo_playground.run_layout import PREFLIGHT_FILE, PROGRESS_FILE, read_json, read_status, write_json_atomic

from pipelines.experiments.tiny_cpu_learning import (_pct, _weights_sha256, evaluate, level_table, paired_difference,
                                                     train)

ROOT = Path(__file__).resolve().parents[2]
ARMS = ("sft_w", "sft_w+grpo_a", "sft_w+more_sft_w", "sft_w+fresh_sft")
STEPS = ("data", *ARMS, "eval")  # in the order they run


def mark(work: Path, step: str, state: str, run_dir: Path | None = None, **facts) -> None:
    """Record in <work>/progress.json that `step` is now running or done (and where it trains, and `facts` such as
    sft-W's rounds so far), atomically: the app reads the file while this process writes it."""
    path = work / PROGRESS_FILE
    progress = read_json(path) or {"order": list(STEPS), "steps": {}}
    entry = {**progress["steps"].get(step, {}), "state": state, "time": time.time(), **facts}  # "done" keeps run_dir
    if run_dir:
        entry["run_dir"] = str(run_dir)
    progress["steps"][step] = entry
    work.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, progress)


def train_step(args, work: Path, step: str, folder: str, stage: str, overrides: list[str]) -> dict:
    """One arm in <work>/<folder>, marked running then done; an arm a resumed run finished before is not run again
    (and not shown as running)."""
    run_dir = work / folder
    if read_status(run_dir).get("state") != "finished":
        mark(work, step, "running", run_dir)
    status = train(args.recipe, run_dir, stage, overrides)
    mark(work, step, "done")
    return status


def _reasoning(example: dict, tags) -> str:
    """The worked reasoning inside a normalized example's tagged completion (what openmath's column holds)."""
    text = example["completion"][0]["content"]
    return text.split(tags.reasoning_start, 1)[-1].split(tags.reasoning_end, 1)[0].strip()


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    tmp.replace(path)


def worked_problems(data_dir: Path) -> list[str]:
    """W's questions, in order, as written to <work>/data/worked.jsonl."""
    return [json.loads(line)["problem"] for line in (data_dir / "worked.jsonl").open()]


def _worked_rows(examples: list[dict], tags) -> list[dict]:
    return [{"problem": e["problem"], "generated_solution": _reasoning(e, tags), "expected_answer": e["answer"]}
            for e in examples]


def build_sets(args, cfg, data_dir: Path) -> dict:
    """W and A (and the eval prompts' questions), written once; a rerun reads the same files back."""
    from grpo_playground.data import load_examples

    tags = cfg.rewards.tags
    sizes_file = data_dir / "sets.json"
    if sizes_file.exists():
        return json.loads(sizes_file.read_text())
    held_out = {e["problem"] for e in load_examples(args.eval_data, n=args.n_eval, tags=tags, seed=args.eval_seed).examples}
    worked = load_examples(args.worked, n=args.n_worked + len(held_out), tags=tags, with_solution=True,
                           seed=cfg.data.seed)
    w = [e for e in worked.examples if e["problem"] not in held_out][: args.n_worked]
    if len(w) < args.n_worked:
        raise SystemExit(f"--worked {args.worked} gave only {len(w)} worked problems outside the held-out prompts "
                         f"({worked.summary()}): lower --n-worked or use a larger file")
    w_questions = {e["problem"] for e in w}
    # Another seed for the generator; a file is read in row order, so skip W's rows when both name one file.
    answers = load_examples(args.answers, n=args.n_answers + args.n_worked + len(held_out), tags=tags,
                            seed=cfg.data.seed + 1)
    a = [e for e in answers.examples if e["problem"] not in held_out and e["problem"] not in w_questions][: args.n_answers]
    if len(a) < args.n_answers:
        raise SystemExit(f"--answers {args.answers} gave only {len(a)} problems outside W and the held-out prompts "
                         f"({answers.summary()}): lower --n-answers or use a larger file")
    _write_jsonl(data_dir / "worked.jsonl", _worked_rows(w, tags))
    _write_jsonl(data_dir / "answers.jsonl", [{"prompt": e["problem"], "solution": e["answer"]} for e in a])
    sizes = {"worked": len(w), "answers": len(a), "held_out": len(held_out),
             "worked_skipped": worked.skipped, "answers_skipped": answers.skipped}
    sizes_file.write_text(json.dumps(sizes, indent=1))
    return sizes


def fresh_set(args, cfg, data_dir: Path, n_fresh: int) -> int:
    """Worked problems of --worked that are in neither W nor the held-out prompts (at most n_fresh of them)."""
    from grpo_playground.data import load_examples

    path = data_dir / "fresh.jsonl"
    if path.exists():
        return sum(1 for _ in path.open())
    tags = cfg.rewards.tags
    w_questions = set(worked_problems(data_dir))
    held_out = {e["problem"] for e in load_examples(args.eval_data, n=args.n_eval, tags=tags, seed=args.eval_seed).examples}
    # Same source and seed as W, drawn larger: W's problems come back first and are dropped by question.
    pool = load_examples(args.worked, n=args.n_worked + args.n_eval + n_fresh, tags=tags, with_solution=True,
                         seed=cfg.data.seed).examples
    fresh = [e for e in pool if e["problem"] not in w_questions and e["problem"] not in held_out][:n_fresh]
    if not fresh:
        raise SystemExit(f"--worked {args.worked} holds no worked problem beyond W: the fresh-SFT arm needs more rows")
    _write_jsonl(path, _worked_rows(fresh, tags))
    return len(fresh)


def sft_until_format(args, cfg, work: Path, worked_spec: str) -> dict:
    """SFT on W in rounds until the sampled format rate on held-out prompts reaches the target."""
    common = ["tracking.swanlab=disabled", "grpo.enabled=false", f"data.sft_source={worked_spec}",
              f"data.eval_source={args.eval_data}", f"sft.max_steps={args.round_steps}", "sft.num_train_epochs=1000",
              f"grpo.preflight_prompts={args.preflight_prompts}", *args.overrides]
    adapter, rounds = cfg.model.name_or_path, []
    for i in range(args.max_rounds):
        run_dir = work / f"sft_w_round{i}"
        # the rounds so far and their sampled format rates: the app shows them (the step count restarts each round);
        # a resumed run's finished rounds are read back, not marked as running again
        if read_status(work / f"sft_w_round{i}_format").get("state") != "finished":
            mark(work, "sft_w", "running", run_dir, round=i + 1, max_rounds=args.max_rounds, rounds=rounds,
                 format_target=args.format_target)
        status = train(args.recipe, run_dir, "sft", [*common, f"model.name_or_path={adapter}",
                                                     *([] if i == 0 else ["sft.warmup_steps=0"])])
        adapter = str(run_dir / "sft")
        check = work / f"sft_w_round{i}_format"
        train(args.recipe, check, "preflight", [*common, f"model.name_or_path={adapter}"])
        rate = read_json(check / PREFLIGHT_FILE)["format_rate"]
        rounds.append({"steps": status["step"], "seconds": status["stage_seconds"]["sft"], "format_rate": rate})
        print(f"sft-W round {i}: {status['step']} steps, sampled format rate {rate:.1%}", flush=True)
        if rate >= args.format_target:
            break
    else:  # the arms still run from the last round; the report says the target was missed
        print(f"sft-W: no {args.format_target:.0%} sampled format rate in {args.max_rounds} rounds; going on from the "
              "last round", flush=True)
    return {"adapter": adapter, "rounds": rounds, "steps": sum(r["steps"] for r in rounds),
            "train_seconds": sum(r["seconds"] for r in rounds),
            "format_rate": rounds[-1]["format_rate"], "format_target_met": rounds[-1]["format_rate"] >= args.format_target}


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


def parse_args(argv: list[str] | None = None) -> CompareArgs:
    parser = CompareArgs.parser()
    args = CompareArgs.parse_args(argv)
    args = dataclasses.replace(args, recipe=args.recipe or ROOT / "recipes" / "tiny-cpu.yaml",
                               work=args.work or ROOT / "runs" / "seed_regime",
                               out=args.out or ROOT / "results" / "learning_seed_regime_cpu")
    for name in ("n_worked", "n_answers", "n_eval", "round_steps", "max_rounds", "preflight_prompts"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 < args.minutes <= 600 or not 0 <= args.format_target <= 1:
        parser.error("--minutes must be in (0, 600] and --format-target in [0, 1] (0: one round of SFT)")
    from grpo_playground.data.spec import parse_spec

    for spec in (args.worked, args.answers, args.eval_data):
        try:
            parse_spec(spec)
        except ValueError as error:
            parser.error(str(error))
    return args


def main(argv: list[str] | None = None) -> int:
    from grpo_playground.config import apply_overrides, load_recipe

    args = parse_args(argv)
    cfg = apply_overrides(load_recipe(args.recipe), args.overrides)
    work = args.work.resolve()
    data_dir = work / "data"
    mark(work, "data", "running")
    sets = build_sets(args, cfg, data_dir)
    mark(work, "data", "done")
    worked_spec = f"openmath:{data_dir / 'worked.jsonl'}"
    base = [*args.overrides, "tracking.swanlab=disabled", f"data.eval_source={args.eval_data}",
            f"grpo.preflight_prompts={args.preflight_prompts}",
            "grpo.on_preflight_error=continue"]  # an arm is measured even when its pre-flight says ERROR

    sft = sft_until_format(args, cfg, work, worked_spec)
    mark(work, "sft_w", "done", rounds=sft["rounds"])  # every round's format rate, the last one's too
    if args.only_sft_w:
        return 0
    grpo_status = train_step(args, work, "sft_w+grpo_a", "grpo_a", "grpo",
                             [*base, f"model.name_or_path={sft['adapter']}", "sft.enabled=false",
                              f"data.grpo_source=dapo:{data_dir / 'answers.jsonl'}", f"data.n_grpo={sets['answers']}",
                              f"grpo.max_minutes={args.minutes}", "grpo.max_steps=1000000"])
    grpo_seconds = grpo_status["stage_seconds"]["grpo"]
    control_lr = args.control_lr if args.control_lr is not None else cfg.sft.learning_rate / 10
    control_steps = max(1, int(grpo_seconds * sft["steps"] / sft["train_seconds"]))
    batch = cfg.sft.per_device_batch_size * cfg.sft.gradient_accumulation_steps
    n_fresh = fresh_set(args, cfg, data_dir, control_steps * batch)
    continuation = [*base, f"model.name_or_path={sft['adapter']}", "grpo.enabled=false", f"sft.learning_rate={control_lr}",
                    "sft.lr_scheduler_type=linear", f"sft.max_minutes={grpo_seconds / 60:.3f}", f"sft.max_steps={control_steps}",
                    "sft.warmup_steps=0", "sft.num_train_epochs=1000"]
    more_w = train_step(args, work, "sft_w+more_sft_w", "more_sft_w", "sft",
                        [*continuation, f"data.sft_source={worked_spec}"])
    fresh = train_step(args, work, "sft_w+fresh_sft", "fresh_sft", "sft",
                       [*continuation, f"data.sft_source=openmath:{data_dir / 'fresh.jsonl'}", f"data.n_sft={n_fresh}"])

    models = {"sft_w": sft["adapter"], "sft_w+grpo_a": str(work / "grpo_a" / "grpo"),
              "sft_w+more_sft_w": str(work / "more_sft_w" / "sft"), "sft_w+fresh_sft": str(work / "fresh_sft" / "sft")}
    mark(work, "eval", "running")
    full = {arm: evaluate(model, work / f"eval_{arm.replace('+', '_')}.json", args.n_eval, cfg.grpo.max_completion_length,
                          args.eval_data, args.eval_seed, args.eval_backend) for arm, model in models.items()}
    result = {
        "command": "OMP_NUM_THREADS=1 python -m pipelines.experiments.seed_regime " + " ".join(argv or sys.argv[1:]),
        "recipe": str(args.recipe.resolve().relative_to(ROOT) if args.recipe.resolve().is_relative_to(ROOT)
                      else args.recipe),
        "sources": {"worked": args.worked, "answers": args.answers, "eval": args.eval_data, "eval_seed": args.eval_seed},
        "sets": {**sets, "fresh": n_fresh},
        "minutes": args.minutes,
        "eval_backend": args.eval_backend,
        "sft_w": {k: v for k, v in sft.items() if k != "adapter"},
        "format_target": args.format_target,
        "sampled_format": {"prompts": args.preflight_prompts, "completions_each": cfg.grpo.num_generations,
                           "temperature": cfg.grpo.temperature},
        "control": {"learning_rate": control_lr, "schedule": "linear to 0", "planned_steps": control_steps},
        "seconds": {"sft_w": sft["train_seconds"], "sft_w+grpo_a": grpo_seconds,
                    "sft_w+more_sft_w": more_w["stage_seconds"]["sft"], "sft_w+fresh_sft": fresh["stage_seconds"]["sft"]},
        "steps": {"sft_w": sft["steps"], "sft_w+grpo_a": grpo_status["step"], "sft_w+more_sft_w": more_w["step"],
                  "sft_w+fresh_sft": fresh["step"]},
        "eval": {arm: {k: v for k, v in f.items() if k not in ("completions", "example_prompt")} for arm, f in full.items()},
        "grpo_minus": {arm: paired_difference(full["sft_w+grpo_a"], full[arm]) for arm in ARMS if arm != "sft_w+grpo_a"},
        "by_template": template_split(worked_problems(data_dir), full),
        "model_sha256": _weights_sha256(cfg.model.name_or_path),
        "versions": _versions(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    args.out.with_suffix(".md").write_text(report(result))
    mark(work, "eval", "done")
    print(report(result))
    return 0


def _versions() -> dict:
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
    n = r["sets"]
    lines = [
        "# GRPO in the seed's data regime: few worked solutions, many answer-only problems", "",
        f"Command: `{r['command']}` (recipe `{r['recipe']}`; base weights sha256 {r['model_sha256'][:16]}...; "
        + ", ".join(f"{k} {v}" for k, v in r["versions"].items()) + ").", "",
        f"Data: W = {n['worked']} worked problems of `{r['sources']['worked']}`; A = {n['answers']} answer-only problems "
        f"of `{r['sources']['answers']}`; fresh = {n['fresh']} other worked problems; none of them among the "
        f"{n['held_out']} held-out `{r['sources']['eval']}` prompts (seed {r['sources']['eval_seed']}), A none of W.", "",
        f"sft-W: {sft['steps']} steps in {len(sft['rounds'])} round(s), {sft['train_seconds']:.0f} s of training "
        "(format checks not counted); sampled format rate after each round: "
        + ", ".join(f"{100 * x['format_rate']:.0f}%" for x in sft["rounds"])
        + f" (target {100 * r['format_target']:.0f}%{'' if sft['format_target_met'] else ', NOT reached'}; "
        f"{r['sampled_format']['prompts']} prompts x "
        f"{r['sampled_format']['completions_each']} completions at temperature {r['sampled_format']['temperature']}).", "",
        f"Each arm after sft-W trained T = {r['minutes']:g} min (the SFT continuations for GRPO's measured time, lr "
        f"{r['control']['learning_rate']:g} {r['control']['schedule']}). Greedy evaluation "
        f"({r.get('eval_backend', 'transformers')}) on the same held-out prompts, ± one standard error:", "",
        "| arm | train time | steps | format rate % | accuracy % |", "|---|---|---|---|---|",
    ]
    for arm in ARMS:
        lines.append(f"| {arm} | {'' if arm == 'sft_w' else '+'}{r['seconds'][arm]:.0f} s | {r['steps'][arm]} | "
                     f"{_pct(e[arm], 'format_rate')} | {_pct(e[arm], 'accuracy')} |")
    lines += ["", "sft-W + grpo-A minus each other arm, paired on the same prompts (accuracy points):", ""]
    for arm, d in r["grpo_minus"].items():
        lines.append(f"- minus {arm}: {100 * d['difference']:+.1f} ± {100 * d['se']:.1f}")
    lines += level_table({arm: e[arm] for arm in ARMS})
    if "by_template" in r:
        lines += ["", "Accuracy (%) on held-out prompts whose template (numbers and capitalised words masked) occurs in W, "
                  "and on the rest; GRPO minus each arm, paired, in points:", "",
                  "| held-out prompts | n | " + " | ".join(ARMS) + " | " + " | ".join(
                      f"grpo minus {arm}" for arm in ARMS if arm != "sft_w+grpo_a") + " |",
                  "|---|---|" + "---|" * (2 * len(ARMS) - 1)]
        for part, d in r["by_template"].items():
            if not d["n"]:
                continue
            diffs = [d["grpo_minus"][arm] for arm in ARMS if arm != "sft_w+grpo_a"]
            lines.append(f"| {part.replace('_', ' ').replace(' w', ' W')} | {d['n']} | "
                         + " | ".join(f"{100 * d['accuracy'][arm]:.1f}" for arm in ARMS) + " | "
                         + " | ".join(f"{100 * x['difference']:+.1f} ± {100 * x['se']:.1f}" if x else "-" for x in diffs)
                         + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
