"""GRPO in the seed's own data regime: worked solutions are scarce, final answers plentiful. Does GRPO on
answer-only problems beat spending the same time on more SFT over the few worked ones?

    OMP_NUM_THREADS=1 python -m pipelines.experiments.seed_regime [--recipe recipes/tiny-cpu.yaml] \
        [--worked generator:train] [--answers generator:train] [--eval-data generator:test] \
        [--n-worked 200] [--n-answers 4000] [--n-eval 600] [--minutes 10] \
        [--eval-data-2 SPEC --n-eval-2 600] [--n-pilot N --pilot NAME[:grpo.KEY=VALUE,...] ... --pilot-minutes 2] \
        [--eval-backend transformers|vllm] [--only-sft-w | --only-arms ARM ...] [--sft-w-sha256 HASH] \
        [--work runs/seed_regime] [--out results/learning_seed_regime_cpu] [--set SECTION.KEY=VALUE ...]

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
  1b. pilots (--pilot, with --n-pilot problems of --answers held out from A): short GRPO runs from sft-W, scored on
     the pilot slice; the most accurate one's settings are the GRPO arm's;
  2. sft-W + grpo-A: GRPO from the sft-W adapter on A for --minutes;
  3. sft-W + more sft-W (the fair control): SFT continued on W for GRPO's measured wall time, lr falling linearly
     from --control-lr (default a tenth of the recipe's SFT rate) to 0 over the steps that fit at step 1's pace;
  3b. the tuned control (with a pilot slice): 3's --control-checkpoints evenly spaced checkpoints and its final
     adapter scored on the pilot slice, the most accurate one kept: SFT gets the chance GRPO's pilots get, chosen
     on the same slice, never on a held-out set (`control_tuned.json`);
  4. sft-W + fresh worked SFT: the same as 3 on worked problems of --worked that are not in W (`fresh.jsonl`):
     the "if gold reasoning were free" row, reported, not a target;
  5. greedy evaluation (`python -m pipelines.eval`) of the four checkpoints on the same --n-eval prompts (and on
     --eval-data-2's, a second column); GRPO's paired differences (with standard errors) against each other arm.
--only-arms and --sft-w-sha256 split the arms over machines that share one sft-W (checked by its hash).
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

from grpo_playground.cli.args import CompareArgs, EvalArgs
from grpo_playground.run_layout import (METRICS_FILE, PREFLIGHT_FILE, PROGRESS_FILE, adapter_dir, checkpoints_dir,
                                        read_json, read_status, write_json_atomic)

from pipelines.experiments.tiny_cpu_learning import (_pct, _weights_sha256, eval_batch, level_table, paired_difference, run,
                                                     train)

ROOT = Path(__file__).resolve().parents[2]
ARMS = ("sft_w", "sft_w+grpo_a", "sft_w+more_sft_w", "sft_w+fresh_sft")
STEPS = ("data", *ARMS, "eval")  # in the order they run
TUNED = "sft_w+tuned_sft_w"  # not trained: the more-SFT control's best checkpoint on the pilot slice
SCORED = (*ARMS[:3], TUNED, ARMS[3])  # the order of the report's rows


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


def _answer_rows(examples: list[dict]) -> list[dict]:
    return [{"prompt": e["problem"], "solution": e["answer"]} for e in examples]


def eval_sources(args) -> list[tuple[str, int]]:
    """The held-out sources every arm is scored on, each with its number of prompts: --eval-data, then
    --eval-data-2 (its own column in the report) when given."""
    return [(args.eval_data, args.n_eval), *([(args.eval_data_2, args.n_eval_2)] if args.eval_data_2 else [])]


def held_out_problems(args, tags) -> set[str]:
    """Every held-out question (of both sources): W, A, the pilot slice and the fresh problems skip them."""
    from grpo_playground.data import load_examples

    return {e["problem"] for spec, n in eval_sources(args)
            for e in load_examples(spec, n=n, tags=tags, seed=args.eval_seed).examples}


def build_sets(args, cfg, data_dir: Path) -> dict:
    """W and A (and the eval prompts' questions), written once; a rerun reads the same files back."""
    from grpo_playground.data import load_examples

    tags = cfg.rewards.tags
    sizes_file = data_dir / "sets.json"
    if sizes_file.exists():
        return json.loads(sizes_file.read_text())
    held_out = held_out_problems(args, tags)
    worked = load_examples(args.worked, n=args.n_worked + len(held_out), tags=tags, with_solution=True,
                           seed=cfg.data.seed)
    w = [e for e in worked.examples if e["problem"] not in held_out][: args.n_worked]
    if len(w) < args.n_worked:
        raise SystemExit(f"--worked {args.worked} gave only {len(w)} worked problems outside the held-out prompts "
                         f"({worked.summary()}): lower --n-worked or use a larger file")
    w_questions = {e["problem"] for e in w}
    # Another seed for the generator; a file is read in row order, so skip W's rows when both name one file.
    wanted = args.n_pilot + args.n_answers
    answers = load_examples(args.answers, n=wanted + args.n_worked + len(held_out), tags=tags,
                            seed=cfg.data.seed + 1)
    pool = [e for e in answers.examples if e["problem"] not in held_out and e["problem"] not in w_questions][:wanted]
    if len(pool) < wanted:
        raise SystemExit(f"--answers {args.answers} gave only {len(pool)} problems outside W and the held-out prompts "
                         f"({answers.summary()}), {wanted} wanted (--n-pilot + --n-answers): lower them or use a "
                         "larger file")
    pilot, a = pool[: args.n_pilot], pool[args.n_pilot:]  # the pilot slice: A's first rows, never trained on by an arm
    _write_jsonl(data_dir / "worked.jsonl", _worked_rows(w, tags))
    _write_jsonl(data_dir / "answers.jsonl", _answer_rows(a))
    if pilot:
        _write_jsonl(data_dir / "pilot.jsonl", _answer_rows(pilot))
    sizes = {"worked": len(w), "answers": len(a), "pilot": len(pilot), "held_out": len(held_out),
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
    held_out = held_out_problems(args, tags)
    # Same source and seed as W, drawn larger: W's problems come back first and are dropped by question.
    pool = load_examples(args.worked, n=args.n_worked + len(held_out) + n_fresh, tags=tags, with_solution=True,
                         seed=cfg.data.seed).examples
    fresh = [e for e in pool if e["problem"] not in w_questions and e["problem"] not in held_out][:n_fresh]
    if not fresh:
        raise SystemExit(f"--worked {args.worked} holds no worked problem beyond W: the fresh-SFT arm needs more rows")
    _write_jsonl(path, _worked_rows(fresh, tags))
    return len(fresh)


def sft_until_format(args, cfg, work: Path, worked_spec: str, check_data: str) -> dict:
    """SFT on W in rounds until the sampled format rate on `check_data`'s prompts reaches the target."""
    common = ["tracking.swanlab=disabled", "grpo.enabled=false", f"data.sft_source={worked_spec}",
              f"data.eval_source={check_data}", f"sft.max_steps={args.round_steps}", "sft.num_train_epochs=1000",
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

    for spec in (args.worked, args.answers, args.eval_data, *([args.eval_data_2] if args.eval_data_2 else [])):
        try:
            parse_spec(spec)
        except ValueError as error:
            parser.error(str(error))
    try:
        [pilot_spec(text) for text in args.pilots]
    except ValueError as error:
        parser.error(str(error))
    if args.pilots and args.n_pilot < 1:
        parser.error("--pilot needs a pilot slice: give --n-pilot N (problems of --answers held out from A)")
    if args.n_pilot < 0 or args.n_eval_2 < 1 or not 0 < args.pilot_minutes <= 60:
        parser.error("--n-pilot must be >= 0, --n-eval-2 >= 1 and --pilot-minutes in (0, 60]")
    if args.sft_w_sha256 and args.only_sft_w:
        parser.error("--sft-w-sha256 checks a carried sft-W before the arms; --only-sft-w trains it: use one")
    return args


def adapter_sha256(adapter: str | Path) -> str:
    """One hash of a checkpoint folder's weights and configs (what an arm starts from), file names included."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(Path(adapter).iterdir()):
        if path.suffix in (".safetensors", ".json"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def carried_sft_w(work: Path, expected: str, base_sha256: str | None = None) -> None:
    """Refuse to start unless the finished sft-W in `work` (carried from an earlier lease) has the expected hash, and
    (given `base_sha256`) sits on the base weights it was trained on: each lease converts the base model anew."""
    entry = (read_json(work / PROGRESS_FILE) or {}).get("steps", {}).get("sft_w", {})
    adapter = Path(entry.get("run_dir", work / "sft_w_round0")) / "sft"
    if entry.get("state") != "done" or not adapter.is_dir():
        raise SystemExit(f"--sft-w-sha256 given but {work} holds no finished sft-W adapter ({adapter} missing): "
                         "restore the earlier lease's work folder and its sft-W adapter there first "
                         "(BENCHMARKS.md, the GSM8K seed regime's plan)")
    found = adapter_sha256(adapter)
    if found != expected:
        raise SystemExit(f"sft-W adapter {adapter} has sha256 {found}, not the {expected} every arm must start from: "
                         "carry the adapter that the earlier lease brought back, unchanged")
    if base_sha256 and entry.get("base_sha256") and entry["base_sha256"] != base_sha256:
        raise SystemExit(f"the base model's weights here have sha256 {base_sha256}, not the {entry['base_sha256']} "
                         "sft-W was trained on: use the same model and package versions as the earlier lease")


def pilot_spec(text: str) -> tuple[str, list[str]]:
    """'NAME:grpo.key=value,grpo.key=value' -> (NAME, overrides); a bare NAME is the recipe as it is."""
    name, _, sets = text.partition(":")
    overrides = [o.strip() for o in sets.split(",") if o.strip()]
    if not name or any("=" not in o or not o.startswith("grpo.") for o in overrides):
        raise ValueError(f"--pilot {text!r}: write NAME or NAME:grpo.KEY=VALUE[,grpo.KEY=VALUE...]")
    return name, overrides


def run_pilots(args, cfg, work: Path, sets: dict, adapter: str, base: list[str]) -> dict:
    """Short GRPO runs from sft-W on A, one per --pilot setting, each scored greedily on the pilot slice (never on
    a held-out set); the most accurate one's settings are the GRPO arm's. Written to <work>/pilots.json."""
    path = work / "pilots.json"
    if path.exists():
        return json.loads(path.read_text())
    pilot_data = f"dapo:{work / 'data' / 'pilot.jsonl'}"
    runs = []
    for text in args.pilots:
        name, overrides = pilot_spec(text)
        run_dir = work / f"pilot_{name}"
        mark(work, "sft_w+grpo_a", "running", run_dir, pilot=name)
        try:
            status = train(args.recipe, run_dir, "grpo",
                           [*base, f"model.name_or_path={adapter}", "sft.enabled=false",
                            f"data.grpo_source=dapo:{work / 'data' / 'answers.jsonl'}", f"data.n_grpo={sets['answers']}",
                            f"grpo.max_minutes={args.pilot_minutes}", "grpo.max_steps=1000000", *overrides])
        except SystemExit as failed:  # a setting that diverges (NaN logits) is a pilot's answer, not the run's end
            runs.append({"name": name, "overrides": overrides, "failed": str(failed)})
            continue
        runs.append({"name": name, "overrides": overrides, "steps": status["step"],
                     "seconds": status["stage_seconds"]["grpo"], "reward": reward_curve(run_dir)})
    trained = [r for r in runs if "failed" not in r]
    if not trained:
        raise SystemExit(f"every GRPO pilot failed: {[r['failed'] for r in runs]}")
    scored = evaluate_together({r["name"]: str(work / f"pilot_{r['name']}" / "grpo") for r in trained},
                               {r["name"]: work / f"eval_pilot_{r['name']}.json" for r in trained}, sets["pilot"],
                               cfg.grpo.max_completion_length, pilot_data, args.eval_seed, args.eval_backend)
    for r in trained:
        r.update(accuracy=scored[r["name"]]["accuracy"], accuracy_se=scored[r["name"]]["accuracy_se"])
    best = max(trained, key=lambda r: r["accuracy"])  # the first of equals: list the recipe's own settings first
    for r in trained:
        r["minus_chosen"] = paired_difference(scored[r["name"]], scored[best["name"]]) if r is not best else None
    pilots = {"minutes": args.pilot_minutes, "n": sets["pilot"], "runs": runs, "chosen": best["name"],
              "overrides": best["overrides"]}
    write_json_atomic(path, pilots)
    return pilots


def tune_control(args, cfg, work: Path, sets: dict, run_dir: Path) -> dict | None:
    """The tuned control: the more-SFT arm's checkpoints and its final adapter scored greedily on the pilot slice
    (as GRPO's pilots are), the most accurate one kept (the latest of equals). None without a pilot slice or with
    --control-checkpoints 0. Written to <work>/control_tuned.json."""
    path = work / "control_tuned.json"
    if path.exists():
        return json.loads(path.read_text())
    if not sets.get("pilot") or not args.control_checkpoints:
        return None
    final_step = read_status(run_dir).get("step")
    steps = {p.name: int(p.name.split("-")[-1]) for p in checkpoints_dir(run_dir, "sft").glob("checkpoint-*")}
    steps = {name: step for name, step in steps.items() if step != final_step}  # the last one is the final adapter
    candidates = {name: checkpoints_dir(run_dir, "sft") / name for name in sorted(steps, key=steps.get)}
    candidates["final"], steps["final"] = adapter_dir(run_dir, "sft"), final_step
    scored = evaluate_together({name: str(p) for name, p in candidates.items()},
                               {name: work / f"eval_control_{name}.json" for name in candidates}, sets["pilot"],
                               cfg.grpo.max_completion_length, f"dapo:{work / 'data' / 'pilot.jsonl'}", args.eval_seed,
                               args.eval_backend)
    best = max(reversed(list(candidates)), key=lambda name: scored[name]["accuracy"])
    tuned = {"n": sets["pilot"], "chosen": best, "adapter": str(candidates[best]), "step": steps[best],
             "candidates": [{"name": name, "step": steps[name], "accuracy": scored[name]["accuracy"],
                             "accuracy_se": scored[name]["accuracy_se"]} for name in candidates]}
    write_json_atomic(path, tuned)
    return tuned


def evaluate_together(models: dict[str, str], outs: dict[str, Path], n: int, max_new_tokens: int, data: str,
                      seed: int, backend: str) -> dict[str, dict]:
    """Score several checkpoints on the same prompts in one `pipelines.eval` process (through vLLM: one engine for
    all of them); a checkpoint whose file exists is read back, not scored again."""
    missing = [name for name in models if not outs[name].exists()]
    if missing:
        command = EvalArgs(tuple(models[m] for m in missing), data, n, eval_batch(n, backend), max_new_tokens, seed=seed,
                           backend=backend, out=tuple(outs[m] for m in missing)).command()
        run(command, outs[missing[0]].with_suffix(".log"))
    return {name: json.loads(outs[name].read_text()) for name in models}


def reward_curve(run_dir: Path, parts: int = 4) -> dict:
    """GRPO's mean check_answer reward, total reward and zero-variance group fraction over each quarter of its
    steps (from metrics.jsonl): has the reward flattened?"""
    metrics = run_dir / METRICS_FILE
    rows = [json.loads(line) for line in metrics.open()] if metrics.exists() else []
    rows = [r for r in rows if "reward" in r]
    curve = {}
    for key in ("rewards/check_answer/mean", "reward", "frac_reward_zero_std"):
        values = [r[key] for r in rows if r.get(key) is not None]
        chunks = [values[i * len(values) // parts:(i + 1) * len(values) // parts] for i in range(parts)]
        curve[key] = [round(sum(c) / len(c), 3) if c else None for c in chunks]
    return curve


def main(argv: list[str] | None = None) -> int:
    from grpo_playground.config import apply_overrides, load_recipe
    from grpo_playground.contracts.process import keep_traceback

    args = parse_args(argv)
    keep_traceback()  # in a job: why it died goes to the file its supervisor reads (not its evaluations' errors)
    cfg = apply_overrides(load_recipe(args.recipe), args.overrides)
    work = args.work.resolve()
    if args.sft_w_sha256:  # before anything runs: a wrong carried checkpoint costs no device time
        carried_sft_w(work, args.sft_w_sha256, _weights_sha256(cfg.model.name_or_path))
    data_dir = work / "data"
    mark(work, "data", "running")
    sets = build_sets(args, cfg, data_dir)
    mark(work, "data", "done")
    worked_spec = f"openmath:{data_dir / 'worked.jsonl'}"
    # the format checks and pre-flights sample the pilot slice when there is one: the held-out sets stay unseen
    check_data = f"dapo:{data_dir / 'pilot.jsonl'}" if sets.get("pilot") else args.eval_data
    base = [*args.overrides, "tracking.swanlab=disabled", f"data.eval_source={check_data}",
            f"grpo.preflight_prompts={args.preflight_prompts}",
            "grpo.on_preflight_error=continue"]  # an arm is measured even when its pre-flight says ERROR

    sft = sft_until_format(args, cfg, work, worked_spec, check_data)
    sft_hash = adapter_sha256(sft["adapter"])
    mark(work, "sft_w", "done", rounds=sft["rounds"], sha256=sft_hash,  # every round's format rate, the last one's too
         base_sha256=_weights_sha256(cfg.model.name_or_path))
    print(f"sft-W adapter {sft['adapter']} sha256 {sft_hash}", flush=True)
    if args.only_sft_w:
        return 0
    pilots = run_pilots(args, cfg, work, sets, sft["adapter"], base) if args.pilots else None
    wanted = set(args.only_arms or ("grpo_a", "more_sft_w", "fresh_sft"))
    started: dict[str, str] = {}

    def arm(name: str, run_dir: Path, stage: str, overrides: list[str]) -> dict:
        """Train one arm from sft-W (or read the finished run a carried work folder holds)."""
        finished = read_status(run_dir).get("state") == "finished"
        if name.split("+")[-1] not in wanted and not finished:
            raise SystemExit(f"{name} has not run in {work}: run it (--only-arms {name.split('+')[-1]}) or carry its "
                             "run folder from the lease that ran it")
        started[name] = adapter_sha256(sft["adapter"])  # the checkpoint it starts from, as it is now
        if started[name] != sft_hash:
            raise SystemExit(f"sft-W's adapter changed under {work} before {name} (sha256 {started[name]}, was {sft_hash})")
        if not finished:  # a resumed comparison does not show an arm it finished before as running again
            mark(work, name, "running", run_dir, start_sha256=started[name])
        status = train(args.recipe, run_dir, stage, [*overrides, f"model.name_or_path={sft['adapter']}"])
        mark(work, name, "done")
        return status

    grpo_status = arm("sft_w+grpo_a", work / "grpo_a", "grpo",
                      [*base, "sft.enabled=false", f"data.grpo_source=dapo:{data_dir / 'answers.jsonl'}",
                       f"data.n_grpo={sets['answers']}", f"grpo.max_minutes={args.minutes}", "grpo.max_steps=1000000",
                       *(pilots["overrides"] if pilots else [])])
    grpo_seconds = grpo_status["stage_seconds"]["grpo"]
    control_lr = args.control_lr if args.control_lr is not None else cfg.sft.learning_rate / 10
    control_steps = max(1, int(grpo_seconds * sft["steps"] / sft["train_seconds"]))
    batch = cfg.sft.per_device_train_batch_size * cfg.sft.gradient_accumulation_steps
    continuation = [*base, "grpo.enabled=false", f"sft.learning_rate={control_lr}",
                    "sft.lr_scheduler_type=linear", f"sft.max_minutes={grpo_seconds / 60:.3f}", f"sft.max_steps={control_steps}",
                    "sft.warmup_steps=0", "sft.num_train_epochs=1000"]
    statuses = {"sft_w+grpo_a": grpo_status}
    n_fresh = fresh_set(args, cfg, data_dir, control_steps * batch) if wanted - {"grpo_a"} else None
    # the tuned control's candidates: evenly spaced checkpoints of the control, all kept (with a pilot slice to pick on)
    saved = ([f"sft.save_steps={max(1, control_steps // args.control_checkpoints)}",
              f"sft.save_total_limit={args.control_checkpoints + 1}"]
             if sets.get("pilot") and args.control_checkpoints else [])
    tuned = None
    if "more_sft_w" in wanted:
        statuses["sft_w+more_sft_w"] = arm("sft_w+more_sft_w", work / "more_sft_w", "sft",
                                           [*continuation, f"data.sft_source={worked_spec}", *saved])
        tuned = tune_control(args, cfg, work, sets, work / "more_sft_w")
    if "fresh_sft" in wanted:
        statuses["sft_w+fresh_sft"] = arm("sft_w+fresh_sft", work / "fresh_sft", "sft",
                                          [*continuation, f"data.sft_source=openmath:{data_dir / 'fresh.jsonl'}",
                                           f"data.n_sft={n_fresh}"])
    models = {"sft_w": sft["adapter"], "sft_w+grpo_a": str(work / "grpo_a" / "grpo"),
              "sft_w+more_sft_w": str(work / "more_sft_w" / "sft"), "sft_w+fresh_sft": str(work / "fresh_sft" / "sft"),
              **({TUNED: tuned["adapter"]} if tuned else {})}
    scored_arms = [a for a in SCORED if a == "sft_w" or a.split("+")[-1] in wanted or (a == TUNED and tuned)]
    mark(work, "eval", "running")
    columns = {spec: evaluate_together({arm: models[arm] for arm in scored_arms},
                                       {arm: work / eval_file(arm, i) for arm in scored_arms}, n,
                                       cfg.grpo.max_completion_length, spec, args.eval_seed, args.eval_backend)
               for i, (spec, n) in enumerate(eval_sources(args))}
    if not set(ARMS) <= set(scored_arms):  # --only-arms: these arms' evaluations are written; the report waits for all
        mark(work, "eval", "partial", arms=scored_arms)
        print(f"--only-arms: trained and scored {', '.join(scored_arms)}; sft-W sha256 {sft_hash}", flush=True)
        return 0
    (spec, full), *second = columns.items()
    result = {
        "command": "OMP_NUM_THREADS=1 python -m pipelines.experiments.seed_regime " + " ".join(argv or sys.argv[1:]),
        "recipe": str(args.recipe.resolve().relative_to(ROOT) if args.recipe.resolve().is_relative_to(ROOT)
                      else args.recipe),
        "sources": {"worked": args.worked, "answers": args.answers, "eval": args.eval_data, "eval_seed": args.eval_seed,
                    **({"eval_2": args.eval_data_2} if args.eval_data_2 else {})},
        "sets": {**sets, "fresh": n_fresh},
        "minutes": args.minutes,
        "eval_backend": args.eval_backend,
        "sft_w": {k: v for k, v in sft.items() if k != "adapter"},
        "sft_w_sha256": sft_hash,
        "start_sha256": started,
        "pilots": pilots,
        "format_target": args.format_target,
        "sampled_format": {"prompts": args.preflight_prompts, "completions_each": cfg.grpo.num_generations,
                           "temperature": cfg.grpo.temperature},
        "control": {"learning_rate": control_lr, "schedule": "linear to 0", "planned_steps": control_steps},
        "control_tuned": tuned,
        "seconds": {"sft_w": sft["train_seconds"],
                    **{arm: s["stage_seconds"]["grpo" if arm == "sft_w+grpo_a" else "sft"]
                       for arm, s in statuses.items()},
                    **({TUNED: statuses["sft_w+more_sft_w"]["stage_seconds"]["sft"]} if tuned else {})},
        "steps": {"sft_w": sft["steps"], **{arm: s["step"] for arm, s in statuses.items()},
                  **({TUNED: tuned["step"]} if tuned else {})},
        "reward_curve": reward_curve(work / "grpo_a"),
        **column(full, worked_problems(data_dir)),
        "second_eval": [{"source": s2, **column(f2, worked_problems(data_dir))} for s2, f2 in second],
        "model_sha256": _weights_sha256(cfg.model.name_or_path),
        "versions": _versions(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    args.out.with_suffix(".md").write_text(report(result))
    mark(work, "eval", "done")
    print(report(result))
    return 0


def eval_file(arm: str, source_index: int) -> str:
    """An arm's evaluation file: eval_<arm>.json on --eval-data (the name earlier runs used), eval2_<arm>.json on
    --eval-data-2."""
    return f"eval{'' if source_index == 0 else source_index + 1}_{arm.replace('+', '_')}.json"


def copy_rate(completions: list[dict], reasoning_end: str = "<end_working_out>") -> dict:
    """Of the completions in format, how often `<SOLUTION>` repeats the reasoning's last number (the copy), and how
    often that last number is the gold answer: a model that reasons right but copies wrong earns no check_answer."""
    from grpo_playground.data.answers import normalize_number

    shaped = [c for c in completions if c.get("in_format")]
    last = [re.findall(r"-?\d+(?:\.\d+)?", c["text"].split(reasoning_end)[0].replace(",", "")) for c in shaped]
    last = [normalize_number(x[-1]) if x else None for x in last]
    n = len(shaped)
    return {"n_in_format": n,
            "copied": round(sum(x is not None and x == normalize_number(c["guess"] or "") for x, c in zip(last, shaped)) / n, 4) if n else None,
            "last_is_gold": round(sum(x is not None and x == normalize_number(c["answer"]) for x, c in zip(last, shaped)) / n, 4) if n else None}


def column(full: dict[str, dict], worked: list[str]) -> dict:
    """One held-out source's numbers: each arm's summary (with its copy rate), GRPO's paired differences, the
    template split."""
    return {"eval": {arm: {**{k: v for k, v in f.items() if k not in ("completions", "example_prompt")},
                           "copy": copy_rate(f["completions"])} for arm, f in full.items()},
            "grpo_minus": {arm: paired_difference(full["sft_w+grpo_a"], f) for arm, f in full.items()
                           if arm != "sft_w+grpo_a"},
            "by_template": template_split(worked, full)}


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
    arms = [arm for arm in SCORED if arm in e]
    n = r["sets"]
    lines = [
        "# GRPO in the seed's data regime: few worked solutions, many answer-only problems", "",
        f"Command: `{r['command']}` (recipe `{r['recipe']}`; base weights sha256 {r['model_sha256'][:16]}...; "
        + ", ".join(f"{k} {v}" for k, v in r["versions"].items()) + ").", "",
        f"Data: W = {n['worked']} worked problems of `{r['sources']['worked']}`; A = {n['answers']} answer-only problems "
        f"of `{r['sources']['answers']}`; fresh = {n['fresh']} other worked problems; none of them among the "
        f"{n['held_out']} held-out `{r['sources']['eval']}`"
        + (f" and `{r['sources']['eval_2']}`" if r["sources"].get("eval_2") else "")
        + f" prompts (seed {r['sources']['eval_seed']}), A none of W"
        + (f", {n['pilot']} problems of A's source held out as the pilot slice" if n.get("pilot") else "") + ".", "",
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
    second = r.get("second_eval") or []
    if second:  # one accuracy column per held-out source
        lines[-2:] = ["| arm | train time | steps | format rate % | accuracy % | "
                      + " | ".join(f"accuracy % on `{c['source']}`" for c in second) + " |",
                      "|---|---|---|---|---|" + "---|" * len(second)]
    for arm in arms:
        lines.append(f"| {arm} | {'' if arm == 'sft_w' else '+'}{r['seconds'][arm]:.0f} s | {r['steps'][arm]} | "
                     f"{_pct(e[arm], 'format_rate')} | {_pct(e[arm], 'accuracy')} |"
                     + "".join(f" {_pct(c['eval'][arm], 'accuracy')} |" for c in second))
    for source, minus in ((r["sources"]["eval"], r["grpo_minus"]), *((c["source"], c["grpo_minus"]) for c in second)):
        lines += ["", f"sft-W + grpo-A minus each other arm on `{source}`, paired on the same prompts (accuracy points):",
                  ""]
        for arm, d in minus.items():
            lines.append(f"- minus {arm}: {100 * d['difference']:+.1f} ± {100 * d['se']:.1f}")
    if r.get("start_sha256"):
        same = set(r["start_sha256"].values()) == {r["sft_w_sha256"]}
        lines += ["", f"Every arm started from sft-W's adapter sha256 {r['sft_w_sha256'][:16]}... "
                  f"({'checked at each arm' if same else 'NOT the same for every arm: ' + str(r['start_sha256'])})."]
    if r.get("reward_curve"):
        lines += ["", "GRPO arm by quarter of its steps: " + "; ".join(
            f"{key} " + " -> ".join("-" if v is None else f"{v:g}" for v in values)
            for key, values in r["reward_curve"].items())]
    if r.get("pilots"):
        pl = r["pilots"]
        lines += ["", f"Pilots ({pl['minutes']:g} min of GRPO each from sft-W on A, greedy on the {pl['n']} pilot "
                  f"problems held out from A; chosen: `{pl['chosen']}`):", "",
                  "| pilot | settings | steps | check_answer by quarter | zero-std groups | pilot accuracy % | minus chosen |",
                  "|---|---|---|---|---|---|---|"]
        for run in pl["runs"]:
            if "failed" in run:  # diverged or crashed: its answer is that it failed
                lines.append(f"| {run['name']} | {', '.join(run['overrides']) or 'the recipe'} | failed: "
                             f"{run['failed'][:120]} | - | - | - | - |")
                continue
            d = run["minus_chosen"]
            lines.append(f"| {run['name']} | {', '.join(run['overrides']) or 'the recipe'} | {run['steps']} | "
                         + " -> ".join("-" if v is None else f"{v:g}" for v in run["reward"]["rewards/check_answer/mean"])
                         + " | " + " -> ".join("-" if v is None else f"{v:g}" for v in run["reward"]["frac_reward_zero_std"])
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
        lines += ["", "Accuracy (%) on held-out prompts whose template (numbers and capitalised words masked) occurs in W, "
                  "and on the rest; GRPO minus each arm, paired, in points:", "",
                  "| held-out prompts | n | " + " | ".join(arms) + " | " + " | ".join(
                      f"grpo minus {arm}" for arm in arms if arm != "sft_w+grpo_a") + " |",
                  "|---|---|" + "---|" * (2 * len(arms) - 1)]
        for part, d in r["by_template"].items():
            if not d["n"]:
                continue
            diffs = [d["grpo_minus"][arm] for arm in arms if arm != "sft_w+grpo_a"]
            lines.append(f"| {part.replace('_', ' ').replace(' w', ' W')} | {d['n']} | "
                         + " | ".join(f"{100 * d['accuracy'][arm]:.1f}" for arm in arms) + " | "
                         + " | ".join(f"{100 * x['difference']:+.1f} ± {100 * x['se']:.1f}" if x else "-" for x in diffs)
                         + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
