"""The learning result on CPU: does GRPO after SFT beat the SFT checkpoint AND an equal-time continuation of SFT?

    OMP_NUM_THREADS=1 python -m pipelines.experiments.tiny_cpu_learning [--recipe recipes/tiny-cpu.yaml] \
        [--work runs/tiny_cpu_learning] [--n-eval 1000] [--grpo-minutes 6] [--out results/tiny_cpu_learning]

Every step runs the product's own CLIs as child processes (as the app does):
  1. pre-flight of the base model (sampled completions, format rate before SFT);
  2. SFT from the recipe (`--stage sft`);
  3. GRPO from that SFT adapter for --grpo-minutes (`model.name_or_path=<sft adapter>`, sft off);
  4. the control: SFT continued from the same adapter for the GRPO stage's measured wall time, on fresh
     generated problems from GRPO's own source (gold solutions are free here, so this is the fair
     alternative use of the time), its learning rate decaying linearly from --control-lr to 0 over the
     steps that fit in that time (at the SFT's measured pace): a continuation that anneals, as the SFT did;
  5. greedy evaluation (`python -m pipelines.eval`) of base, SFT, SFT+GRPO and SFT+more-SFT on the same
     --n-eval held-out prompts, with standard errors; plus the sampled format rate from the pre-flights.
Writes <out>.json (every number) and <out>.md (the table and the command).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grpo_playground.experiments import children
from grpo_playground.experiments.checkpoints import weights_sha256
from grpo_playground.experiments.children import evaluate
from grpo_playground.experiments.report import level_table, paired_difference, pct
from grpo_playground.contracts.layout import PREFLIGHT_FILE
from grpo_playground.contracts.process import read_json

ROOT = Path(__file__).resolve().parents[2]
OVERRIDES: list[str] = []  # --set values, applied to every run before the step's own


def train(recipe: Path, run_dir: Path, stage: str, overrides: list[str]) -> dict:
    """The package's experiment step, with --set's values before the step's own."""
    return children.train(recipe, run_dir, stage, [*OVERRIDES, *overrides])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.experiments.tiny_cpu_learning")
    parser.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "tiny-cpu.yaml")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "tiny_cpu_learning")
    parser.add_argument("--n-eval", type=int, default=1000)
    parser.add_argument("--grpo-minutes", type=float, default=6.0)
    parser.add_argument("--preflight-prompts", type=int, default=16)
    parser.add_argument("--control-lr", type=float, default=None,
                        help="peak learning rate of the SFT control (default: a tenth of the recipe's SFT rate, "
                             "where the SFT's own linear schedule stood at 90%% of its run)")
    parser.add_argument("--eval-data", default="generator:test", help="held-out source spec, e.g. generator:test?levels=1-2")
    parser.add_argument("--eval-seed", type=int, default=0,
                        help="which held-out prompts are drawn: a new seed confirms a setting chosen on another seed")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "tiny_cpu_learning")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="recipe override passed to every training run (e.g. model.name_or_path=DIR)")
    args = parser.parse_args(argv)
    OVERRIDES[:] = args.overrides
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    from grpo_playground.config import apply_overrides, load_recipe

    cfg = apply_overrides(load_recipe(args.recipe), args.overrides)
    eval_tokens = cfg.grpo.max_completion_length
    pre = [f"grpo.preflight_prompts={args.preflight_prompts}", "tracking.swanlab=disabled",
           "grpo.on_preflight_error=continue"]  # the GRPO arm is measured even when its pre-flight says ERROR

    train(args.recipe, work / "base", "preflight", pre)
    base_pre = read_json(work / "base" / PREFLIGHT_FILE)
    sft_status = train(args.recipe, work / "sft", "sft", ["tracking.swanlab=disabled"])
    sft_adapter = work / "sft" / "sft"
    grpo_status = train(args.recipe, work / "grpo", "grpo",
                        [*pre, f"model.name_or_path={sft_adapter}", "sft.enabled=false",
                         f"grpo.max_minutes={args.grpo_minutes}", "grpo.max_steps=100000"])
    grpo_seconds = grpo_status["stage_seconds"]["grpo"]
    control_lr = args.control_lr if args.control_lr is not None else cfg.sft.learning_rate / 10
    control_steps = max(1, int(grpo_seconds * sft_status["step"] / sft_status["stage_seconds"]["sft"]))
    control_status = train(args.recipe, work / "sft_more", "sft",
                           ["tracking.swanlab=disabled", f"model.name_or_path={sft_adapter}", "grpo.enabled=false",
                            f"data.sft_source={cfg.data.grpo_source}", f"sft.learning_rate={control_lr}",
                            f"sft.max_minutes={grpo_seconds / 60:.3f}", f"sft.max_steps={control_steps}",
                            "sft.warmup_steps=0", f"data.seed={cfg.data.seed + 1}"])

    models = {"base": "tiny" if cfg.model.name_or_path == "tiny" else cfg.model.name_or_path,
              "sft": str(sft_adapter), "sft+grpo": str(work / "grpo" / "grpo"), "sft+more_sft": str(work / "sft_more" / "sft")}
    # The base never writes the format (the pre-flight shows it), so a small sample of it is enough.
    full = {name: evaluate(model, work / f"eval_{name.replace('+', '_')}.json",
                           min(args.n_eval, 200) if name == "base" else args.n_eval, eval_tokens, args.eval_data,
                           args.eval_seed)
            for name, model in models.items()}
    evals = {name: {k: v for k, v in f.items() if k not in ("completions", "example_prompt")} for name, f in full.items()}
    sft_pre = read_json(work / "grpo" / PREFLIGHT_FILE)
    result = {
        "command": "OMP_NUM_THREADS=1 python -m pipelines.experiments.tiny_cpu_learning " + " ".join(argv or sys.argv[1:]),
        "recipe": str(args.recipe.relative_to(ROOT) if args.recipe.is_relative_to(ROOT) else args.recipe),
        "n_eval": args.n_eval,
        "eval_data": args.eval_data,
        "eval_seed": args.eval_seed,
        "sampled_format_rate": {"base": base_pre["format_rate"], "sft": sft_pre["format_rate"],
                                "samples": base_pre["groups_sampled"] * cfg.grpo.num_generations,
                                "temperature": cfg.grpo.temperature},
        "control": {"learning_rate": control_lr, "schedule": "linear to 0", "source": cfg.data.grpo_source},
        "seconds": {"sft": sft_status["stage_seconds"]["sft"], "grpo": grpo_seconds,
                    "sft_more": control_status["stage_seconds"]["sft"]},
        "steps": {"sft": sft_status["step"], "grpo": grpo_status["step"], "sft_more": control_status["step"]},
        "eval": evals,
        "grpo_minus_sft": paired_difference(full["sft+grpo"], full["sft"]),
        "grpo_minus_more_sft": paired_difference(full["sft+grpo"], full["sft+more_sft"]),
        "model_sha256": weights_sha256(cfg.model.name_or_path),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    args.out.with_suffix(".md").write_text(report(result))
    print(report(result))
    return 0


def report(r: dict) -> str:
    e = r["eval"]
    lines = [
        "# Learning on CPU: tiny model, SFT then GRPO vs an equal-time SFT control", "",
        f"Command: `{r['command']}` (recipe `{r['recipe']}`; base weights sha256 {r['model_sha256'][:16]}...; "
        "2 CPU cores shared with other jobs, one torch thread per process).", "",
        f"Control: SFT continued on {r['control']['source']} from lr {r['control']['learning_rate']:g}, "
        f"{r['control']['schedule']}.", "",
        f"Sampled format rate ({r['sampled_format_rate']['samples']} completions at temperature "
        f"{r['sampled_format_rate']['temperature']}, from the pre-flight): base "
        f"{100 * r['sampled_format_rate']['base']:.1f}% -> after SFT {100 * r['sampled_format_rate']['sft']:.1f}%.", "",
        f"Greedy evaluation on {r['n_eval']} held-out {r['eval_data']} prompts (seed {r['eval_seed']}; the base on the first "
        f"{e['base']['n']}), ± one standard error:", "",
        "| checkpoint | train time | steps | format rate % | accuracy % |", "|---|---|---|---|---|",
    ]
    rows = [("base", "-", "-"), ("sft", f"{r['seconds']['sft']:.0f} s", r["steps"]["sft"]),
            ("sft+grpo", f"+{r['seconds']['grpo']:.0f} s", r["steps"]["grpo"]),
            ("sft+more_sft", f"+{r['seconds']['sft_more']:.0f} s", r["steps"]["sft_more"])]
    for name, seconds, steps in rows:
        lines.append(f"| {name} | {seconds} | {steps} | {pct(e[name], 'format_rate')} | {pct(e[name], 'accuracy')} |")
    for key, label in (("grpo_minus_sft", "SFT checkpoint"), ("grpo_minus_more_sft", "equal-time SFT control")):
        d = r[key]
        lines.append(f"\nSFT+GRPO minus {label}, paired on the same prompts: {100 * d['difference']:+.1f} ± "
                     f"{100 * d['se']:.1f} accuracy points.")
    return "\n".join(lines + level_table(e)) + "\n"


if __name__ == "__main__":
    sys.exit(main())
