"""GRPO in the seed's own data regime: worked solutions are scarce, final answers plentiful. Does GRPO on
answer-only problems beat spending the same time on more SFT over the few worked ones?

    OMP_NUM_THREADS=1 grpo-playground compare [--recipe recipes/tiny-cpu.yaml] \
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
  3b. the tuned control (with a pilot slice): 3's checkpoints, --control-checkpoints evenly spaced in its planned
     steps and as many in the time it trains (sft.save_minutes = T / (k + 1)), so that it has them whichever of its
     steps or its time budget ends it, and its final adapter scored on the pilot slice, the
     most accurate one kept: SFT gets the chance GRPO's pilots get, chosen on the same slice, never on a held-out set
     (`control_tuned.json`);
  4. sft-W + fresh worked SFT: the same as 3 on worked problems of --worked that are not in W (`fresh.jsonl`):
     the "if gold reasoning were free" row, reported, not a target;
  5. greedy evaluation (`grpo-playground eval`) of the four checkpoints on the same --n-eval prompts (and on
     --eval-data-2's, a second column); GRPO's paired differences (with standard errors) against each other arm.
--only-arms and --sft-w-sha256 split the arms over machines that share one sft-W (checked by its hash).
Writes <out>.json (every number) and <out>.md (tables, the command, versions). While it runs, <work>/progress.json
says which step runs (data, sft_w, one per arm, eval) and the run folder it trains in, so the app can show progress.
The app's "GRPO vs more SFT" panel runs this module as a job (grpo_playground.jobs.comparisons), its arguments from
a ComparisonPlan (experiments/plan.py); `python -m pipelines.experiments.seed_regime` in a checkout runs it too.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

from grpo_playground.cli.args import CompareArgs
from grpo_playground.contracts.shipped import recipe_path
from grpo_playground.experiments.checkpoints import adapter_sha256, carried_sft_w, weights_sha256
from grpo_playground.experiments.children import evaluate_together, train
from grpo_playground.experiments.data_sets import build_sets, eval_sources, fresh_set, worked_problems
from grpo_playground.experiments.progress import ARMS, SCORED, TUNED, mark
from grpo_playground.experiments.report import column, paired_difference, report, reward_curve, versions
from grpo_playground.contracts.layout import PREFLIGHT_FILE
from grpo_playground.contracts.process import read_json, write_json_atomic, write_text_atomic
from grpo_playground.run_layout import adapter_dir, checkpoints_dir, read_status


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
            "format_rate": rounds[-1]["format_rate"],
            "format_target_met": rounds[-1]["format_rate"] >= args.format_target}


def parse_args(argv: list[str] | None = None) -> CompareArgs:
    parser = CompareArgs.parser()
    args = CompareArgs.parse_args(argv)
    args = dataclasses.replace(args, recipe=args.recipe or recipe_path("tiny-cpu"),
                               work=args.work or Path("runs", "seed_regime"),
                               out=args.out or Path("results", "learning_seed_regime_cpu"))
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
                            f"data.grpo_source=dapo:{work / 'data' / 'answers.jsonl'}",
                            f"data.n_grpo={sets['answers']}",
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


def main(argv: list[str] | None = None) -> int:
    from grpo_playground.config import apply_overrides, load_recipe
    from grpo_playground.contracts.process import keep_traceback

    args = parse_args(argv)
    keep_traceback()  # in a job: why it died goes to the file its supervisor reads (not its evaluations' errors)
    cfg = apply_overrides(load_recipe(args.recipe), args.overrides)
    work = args.work.resolve()
    if args.sft_w_sha256:  # before anything runs: a wrong carried checkpoint costs no device time
        carried_sft_w(work, args.sft_w_sha256, weights_sha256(cfg.model.name_or_path))
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
         base_sha256=weights_sha256(cfg.model.name_or_path))
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
            raise SystemExit(f"sft-W's adapter changed under {work} before {name} (sha256 {started[name]}, "
                             f"was {sft_hash})")
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
    budget = max(0.01, round(grpo_seconds / 60, 3))  # minutes: the arms' time budget, as --set writes it
    continuation = [*base, "grpo.enabled=false", f"sft.learning_rate={control_lr}",
                    "sft.lr_scheduler_type=linear", f"sft.max_minutes={budget}",
                    f"sft.max_steps={control_steps}",
                    "sft.warmup_steps=0", "sft.num_train_epochs=1000"]
    statuses = {"sft_w+grpo_a": grpo_status}
    n_fresh = fresh_set(args, cfg, data_dir, control_steps * batch) if wanted - {"grpo_a"} else None
    # the tuned control's candidates (with a pilot slice to pick on), all kept with its final adapter: k evenly spaced
    # in its planned steps, and k evenly spaced in its own time (a checkpoint every T / (k + 1) minutes, rounded up so
    # the last comes no earlier than the budget's end). Whichever ends the control, its steps (a faster pace than
    # sft-W's) or its time budget (a slower one: a loaded machine reached 235 of 686 planned steps), it has k or more.
    k = args.control_checkpoints
    saved = ([f"sft.save_minutes={max(0.001, math.ceil(budget / (k + 1) * 1e6) / 1e6):.6f}",
              f"sft.save_steps={max(1, control_steps // k)}", f"sft.save_total_limit={2 * k + 1}"]
             if sets.get("pilot") and k else [])
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
        "command": "OMP_NUM_THREADS=1 grpo-playground compare " + " ".join(argv or sys.argv[1:]),
        "recipe": shown_path(args.recipe),
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
        "model_sha256": weights_sha256(cfg.model.name_or_path),
        "versions": versions(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out.with_suffix(".json"), result)  # the job's result: whole or absent to a reader
    write_text_atomic(args.out.with_suffix(".md"), report(result))
    mark(work, "eval", "done")
    print(report(result))
    return 0


def eval_file(arm: str, source_index: int) -> str:
    """An arm's evaluation file: eval_<arm>.json on --eval-data (the name earlier runs used), eval2_<arm>.json on
    --eval-data-2."""
    return f"eval{'' if source_index == 0 else source_index + 1}_{arm.replace('+', '_')}.json"


def shown_path(path: Path) -> str:
    """A path as the report shows it: relative to the current folder when inside it (recipes/tiny-cpu.yaml)."""
    here, absolute = Path.cwd(), path.absolute()
    return str(absolute.relative_to(here) if absolute.is_relative_to(here) else path)


if __name__ == "__main__":
    sys.exit(main())
