"""A recipe, or a run's SFT checkpoint, as a verl or OpenRLHF GRPO job: the way out when one GPU is not enough.

`grpo-playground scale-out --config RECIPE [--run RUN] --out DIR` writes one folder:
- `reward.py`: verl's `compute_score` and OpenRLHF's `reward_func`, both the recipe's own reward functions with its
  tags and weights (grpo_playground.rewards.portable), so the reward there is the reward here;
- `train.parquet` / `test.parquet` (verl: chat messages, `reward_model.ground_truth`) and `train.jsonl` /
  `test.jsonl` (OpenRLHF: the prompt rendered exactly as the Playground trains on it, prefill included);
- `verl_grpo.yaml` + `run_verl.sh` and `run_openrlhf.sh`: the recipe's model, LoRA, batch, sampling, KL, clipping,
  loss aggregation and schedule in each trainer's own keys (checked against verl 0.9.1's config and OpenRLHF
  0.11.2's argument parser in tests/test_scale_out.py);
- `README.md`: how to run both, and every setting that has no equivalent there (SCALE_OUT_RESULT lists them too).

verl starts GRPO from the run's SFT adapter itself (`lora_adapter_path`); OpenRLHF needs a full model, the run's
merged export (`grpo-playground export --run RUN --stage sft`). Needs the model's tokenizer (its chat template).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grpo_playground.config import RunConfig
from grpo_playground.contracts.layout import EXPORT_MERGED_DIR, SCALE_OUT_RESULT
from grpo_playground.run_layout import adapter_dir, export_dir, stage_done

VERL_VERSION, OPENRLHF_VERSION = "0.9.1", "0.11.2"  # the versions the written configs were checked against
MAX_MICRO_BATCH = 16  # completions per forward: more is rarely faster and risks the memory of a long-completion run
# TRL loss_type -> verl's (loss_agg_mode, policy_loss.loss_mode) and OpenRLHF's loss_agg_mode
VERL_LOSS = {"grpo": ("seq-mean-token-mean", "vanilla"), "dr_grpo": ("seq-mean-token-sum-norm", "vanilla"),
             "dapo": ("token-mean", "vanilla"), "bnpo": ("token-mean", "vanilla"), "cispo": ("token-mean", "cispo"),
             "sapo": ("token-mean", "sapo")}
OPENRLHF_LOSS = {"grpo": "seq-mean-token-mean", "dapo": "token-mean", "bnpo": "token-mean"}


@dataclass
class ScaleOut:
    """What both trainers start from, and what does not carry over (said in the README and in scale_out.json)."""

    cfg: RunConfig
    base: str  # the model the trainer loads: a hub id, or a local folder (copy it to the cluster)
    adapter: Path | None  # the run's SFT adapter (verl starts from it)
    merged: Path | None  # the run's merged SFT model (OpenRLHF starts from it), when exported
    chat_template: str  # the tokenizer's template with the recipe's prefill: verl renders prompts with it
    end_markers: tuple[str, ...]
    tokenizer: object = field(repr=False)  # the model's (the run's adapter's when it has one): renders the prompts
    notes: list[str] = field(default_factory=list)

    @property
    def prompts_per_step(self) -> int:
        g = self.cfg.grpo
        per_device, _ = g.generation_batch(self.cfg.hardware.num_gpus)
        return max(1, per_device * g.gradient_accumulation_steps * self.cfg.hardware.num_gpus // g.num_generations)

    @property
    def rollout_share(self) -> float:
        """vLLM's gpu_memory_utilization: the recipe's, else half the card (verl's default; the colocated training
        needs the rest)."""
        return self.cfg.model.gpu_memory_utilization or 0.5

    @property
    def micro_batch(self) -> int:
        """Completions per forward on one GPU: the recipe's per-device batch, or its largest divisor up to 16 (both
        trainers need it to divide each GPU's share of the step)."""
        per_device, _ = self.cfg.grpo.generation_batch(self.cfg.hardware.num_gpus)
        return max(d for d in range(1, min(per_device, MAX_MICRO_BATCH) + 1) if per_device % d == 0)


def plan(cfg: RunConfig, run_dir: Path | None = None) -> ScaleOut:
    """The starting point: the recipe's model (or the run's SFT checkpoint on it) and its chat template."""
    from grpo_playground.data.chat_template import turn_end, with_prefill
    from grpo_playground.models import hf_dir, load_tokenizer, resolve_model
    from grpo_playground.serving.backends import vllm_adapter_problem

    spec = resolve_model(cfg.model.name_or_path)
    base = spec.location if spec.source == "hub" else str(Path(hf_dir(spec)).resolve())
    adapter = merged = None
    notes = []
    if run_dir is not None:
        if not stage_done(run_dir, "sft"):
            raise ValueError(f"{run_dir} has no finished SFT adapter (sft/): scale out a run after its SFT stage, "
                             "or give only --config to start from the recipe's model")
        adapter = adapter_dir(run_dir, "sft").resolve()
        problem = vllm_adapter_problem(adapter)
        if problem:  # verl serves the adapter through vLLM's LoRA path, as the Chat tab does
            raise ValueError(f"verl cannot start from this adapter: {problem}")
        if (export_dir(run_dir, "sft") / EXPORT_MERGED_DIR / "config.json").is_file():
            merged = (export_dir(run_dir, "sft") / EXPORT_MERGED_DIR).resolve()
        else:
            notes.append(f"OpenRLHF starts from a full model: run `grpo-playground export --run {run_dir} --stage sft` "
                         f"and write again, or run_openrlhf.sh starts from the base model {base}")
    tokenizer = load_tokenizer(str(adapter) if adapter else cfg.model.name_or_path)
    template = tokenizer.chat_template
    if cfg.data.prefill_reasoning:
        template = with_prefill(template, cfg.rewards.tags.reasoning_start)
    markers = tuple(dict.fromkeys(m for m in (turn_end(tokenizer), tokenizer.eos_token, tokenizer.pad_token) if m))
    return ScaleOut(cfg, base, adapter, merged, template, markers, tokenizer, notes + _loss_notes(cfg))


def _loss_notes(cfg: RunConfig) -> list[str]:
    g, notes = cfg.grpo, []
    if g.loss_type not in VERL_LOSS:
        notes.append(f"grpo.loss_type {g.loss_type} has no verl equivalent: verl runs vanilla clipping, token-mean")
    if g.loss_type not in OPENRLHF_LOSS:
        notes.append(f"grpo.loss_type {g.loss_type}: OpenRLHF aggregates token-mean (it has no "
                     f"{'constant-length normalization' if g.loss_type == 'dr_grpo' else g.loss_type + ' loss'})")
    if g.scale_rewards == "batch":
        notes.append("grpo.scale_rewards batch: both trainers scale by the group's std instead")
    if g.top_entropy_quantile < 1.0:
        notes.append("grpo.top_entropy_quantile: neither trainer masks low-entropy tokens; all tokens train")
    if g.mask_truncated_completions:
        notes.append("grpo.mask_truncated_completions: not written; verl and OpenRLHF train on truncated completions")
    if g.trl_options:  # TRL's names, with no one mapping onto either trainer's keys
        notes.append(f"grpo's other TRL options ({', '.join(sorted(g.trl_options))}): not written; set their verl or "
                     "OpenRLHF counterparts by hand")
    if cfg.model.backend == "unsloth" or cfg.model.load_in_4bit:
        notes.append(f"model.backend {cfg.model.backend}, load_in_4bit {cfg.model.load_in_4bit}: both trainers run "
                     "bf16 LoRA with their own FSDP / DeepSpeed sharding instead")
    return notes


def verl_config(s: ScaleOut, folder: Path) -> dict:
    """verl_grpo.yaml: verl's own ppo_trainer defaults, then the recipe in verl's keys."""
    cfg, g, lora = s.cfg, s.cfg.grpo, s.cfg.lora
    agg, mode = VERL_LOSS.get(g.loss_type, ("token-mean", "vanilla"))
    micro = s.micro_batch
    model = {"path": s.base, "lora_rank": lora.r, "lora_alpha": lora.alpha, "target_modules": list(lora.target_modules),
             "custom_chat_template": s.chat_template}
    if s.adapter:
        model["lora_adapter_path"] = str(s.adapter)
    return {
        "hydra": {"searchpath": ["pkg://verl.trainer.config"]},
        "defaults": ["ppo_trainer", "_self_"],
        "algorithm": {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": g.scale_rewards != "none",
                      "use_kl_in_reward": False},
        "data": {"train_files": str(folder / "train.parquet"), "val_files": str(folder / "test.parquet"),
                 "prompt_key": "prompt", "max_prompt_length": cfg.model.max_seq_length - g.max_completion_length,
                 "max_response_length": g.max_completion_length, "train_batch_size": s.prompts_per_step,
                 "filter_overlong_prompts": True, "truncation": "error", "seed": cfg.data.seed,
                 "apply_chat_template_kwargs": {"enable_thinking": False}},
        "actor_rollout_ref": {
            "model": model,
            "actor": {"optim": {"lr": g.learning_rate, "weight_decay": g.weight_decay, "lr_warmup_steps": g.warmup_steps},
                      "ppo_mini_batch_size": s.prompts_per_step, "ppo_micro_batch_size_per_gpu": micro,
                      "ppo_epochs": g.num_iterations, "use_kl_loss": g.beta > 0, "kl_loss_coef": g.beta,
                      "kl_loss_type": "low_var_kl", "clip_ratio_low": g.epsilon, "clip_ratio_high": g.epsilon,
                      "loss_agg_mode": agg, "policy_loss": {"loss_mode": mode}, "entropy_coeff": 0},
            "rollout": {"name": "vllm", "n": g.num_generations, "temperature": g.temperature, "top_p": g.top_p,
                        "gpu_memory_utilization": s.rollout_share,
                        "tensor_model_parallel_size": 1, "log_prob_micro_batch_size_per_gpu": micro,
                        "load_format": "safetensors"},  # verl's LoRA sync loads the adapter's weights this way
            "ref": {"log_prob_micro_batch_size_per_gpu": micro},
        },
        "reward": {"custom_reward_function": {"path": str(folder / "reward.py"), "name": "compute_score"}},
        "trainer": {"project_name": cfg.tracking.project, "experiment_name": cfg.name,
                    "logger": ["console", "swanlab"] if cfg.tracking.swanlab != "disabled" else ["console"],
                    "n_gpus_per_node": cfg.hardware.num_gpus, "nnodes": 1, "total_training_steps": g.max_steps,
                    "save_freq": g.save_steps, "test_freq": g.save_steps, "critic_warmup": 0},
    }


def openrlhf_args(s: ScaleOut, folder: Path) -> list[str]:
    """`python -m openrlhf.cli.train_ppo_ray` arguments: every model on the same GPUs (colocated, vLLM asleep while
    training), the prompts already rendered (no --data.apply_chat_template)."""
    cfg, g, lora = s.cfg, s.cfg.grpo, s.cfg.lora
    gpus, prompts = str(cfg.hardware.num_gpus), s.prompts_per_step
    kl = ["--algo.kl.use_loss", "--algo.kl.estimator", "k3", "--algo.kl.init_coef", str(g.beta)] if g.beta > 0 else \
        ["--algo.kl.init_coef", "0"]
    return [
        "--actor.model_name_or_path", str(s.merged or s.base), "--reward.remote_url", str(folder / "reward.py"),
        "--data.prompt_dataset", str(folder / "train.jsonl"), "--data.input_key", "prompt",
        "--data.label_key", "answer", "--data.max_samples", str(g.max_steps * prompts),
        "--data.max_len", str(cfg.model.max_seq_length), "--eval.dataset", str(folder / "test.jsonl"),
        "--eval.steps", str(g.save_steps),
        "--actor.num_nodes", "1", "--actor.num_gpus_per_node", gpus, "--ref.num_nodes", "1",
        "--ref.num_gpus_per_node", gpus, "--vllm.num_engines", gpus, "--vllm.tensor_parallel_size", "1",
        "--vllm.gpu_memory_utilization", str(s.rollout_share), "--vllm.enable_sleep",
        "--ds.enable_sleep", "--train.colocate_all",
        "--algo.advantage.estimator", "group_norm" if g.scale_rewards != "none" else "dr_grpo",
        "--rollout.n_samples_per_prompt", str(g.num_generations), "--rollout.batch_size", str(prompts),
        "--train.batch_size", str(prompts * g.num_generations), "--train.max_epochs", str(g.num_iterations),
        "--rollout.micro_batch_size", str(s.micro_batch), "--train.micro_batch_size", str(s.micro_batch),
        "--rollout.max_new_tokens", str(g.max_completion_length), "--rollout.temperature", str(g.temperature),
        "--rollout.top_p", str(g.top_p), *kl, "--actor.eps_clip", str(g.epsilon),
        "--actor.loss_agg_mode", OPENRLHF_LOSS.get(g.loss_type, "token-mean"),
        "--actor.adam.lr", str(g.learning_rate), "--actor.adam.weight_decay", str(g.weight_decay),
        "--ds.lora.rank", str(lora.r), "--ds.lora.alpha", str(lora.alpha),
        "--ds.lora.target_modules", *lora.target_modules, "--ds.param_dtype", "bf16", "--ds.zero_stage", "2",
        "--actor.gradient_checkpointing_enable", "--train.seed", str(cfg.lora.seed),
        "--ckpt.save_steps", str(g.save_steps), "--ckpt.output_dir", str(folder / "openrlhf_out"),
        "--ckpt.path", str(folder / "openrlhf_ckpt"),
    ]


def reward_module(s: ScaleOut) -> str:
    """reward.py: the recipe's rewards as verl and OpenRLHF load them (a file path; both import it by location)."""
    weights = {k: float(v) for k, v in s.cfg.rewards.weights.items() if v}
    return f'''"""Rewards of the GRPO Playground recipe {s.cfg.name!r}: verl's compute_score, OpenRLHF's reward_func.

Written by `grpo-playground scale-out`: the reward functions, tags and weights the Playground trains with, so a
run's reward means the same there. Needs the grpo-playground package where the trainer runs (pip install --no-deps
it, with `regex`).
"""

from grpo_playground.rewards.portable import PortableRewards
from grpo_playground.rewards.shaping import Shaping
from grpo_playground.tags import Tags

REWARDS = PortableRewards(weights={weights!r},
                          tags=Tags(**{s.cfg.rewards.tags.to_dict()!r}),
                          end_markers={s.end_markers!r},
                          shaping=Shaping(**{asdict(s.cfg.rewards.shaping(s.cfg.grpo.max_completion_length))!r}))


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """verl: the weighted total as "score", each reward function's own score logged beside it."""
    return REWARDS.score(solution_str, ground_truth)


def reward_func(queries, prompts, labels, **kwargs):
    """OpenRLHF: prompt + response (special tokens kept) per query, the gold answer as its label."""
    return REWARDS.openrlhf(queries, prompts, labels)
'''


def write(s: ScaleOut, out: Path, n_eval: int) -> dict:
    """Write the folder in a temporary sibling, then move it into place: a failure leaves no half-written folder."""
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty: give a new --out folder (nothing is overwritten)")
    final = out.resolve()
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        counts = _write_data(s, tmp, n_eval)
        import yaml

        (tmp / "reward.py").write_text(reward_module(s))
        header = (f"# GRPO Playground recipe {s.cfg.name!r} as a verl {VERL_VERSION} GRPO run: {final / 'run_verl.sh'}\n")
        (tmp / "verl_grpo.yaml").write_text(header + yaml.safe_dump(verl_config(s, final), sort_keys=False, width=120))
        _write_script(tmp / "run_verl.sh", f"a verl {VERL_VERSION}",
                      ["python3", "-m", "verl.trainer.main_ppo", f"--config-path={final}", "--config-name=verl_grpo"],
                      _swanlab_mode(s.cfg.tracking.swanlab))
        _write_script(tmp / "run_openrlhf.sh", f"an OpenRLHF {OPENRLHF_VERSION}",
                      ["python3", "-m", "openrlhf.cli.train_ppo_ray", *openrlhf_args(s, final)])
        summary = {"recipe": s.cfg.name, "base": s.base, "adapter": str(s.adapter) if s.adapter else None,
                   "merged": str(s.merged) if s.merged else None, "rows": counts, "verl": VERL_VERSION,
                   "openrlhf": OPENRLHF_VERSION, "not_carried_over": s.notes}
        (tmp / SCALE_OUT_RESULT).write_text(json.dumps(summary, indent=1))
        (tmp / "README.md").write_text(_readme(s, final, counts))
        if out.exists():
            out.rmdir()  # empty: checked above
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return summary


def zip_folder(folder: Path) -> Path:
    """FOLDER.zip beside the folder (what the app offers for download), written beside and renamed into place."""
    folder = folder.resolve()
    target = folder.with_name(folder.name + ".zip")
    partial = shutil.make_archive(str(folder.with_name(f".{folder.name}.{os.getpid()}")), "zip", folder.parent,
                                  folder.name)
    os.replace(partial, target)
    return target


def _write_data(s: ScaleOut, folder: Path, n_eval: int) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from grpo_playground.data import load_examples
    from grpo_playground.data.chat_template import render_prompt

    cfg, tags = s.cfg, s.cfg.rewards.tags
    counts = {}
    for split, source, n in (("train", cfg.data.grpo_source, cfg.data.n_grpo), ("test", cfg.data.eval_source, n_eval)):
        examples = load_examples(source, n=n, tags=tags, seed=cfg.data.seed).examples
        if not examples:
            raise ValueError(f"{source} gave no examples for the {split} split: check data.grpo_source / eval_source")
        rows = [{"data_source": source, "prompt": e["prompt"], "ability": "math",
                 "reward_model": {"style": "rule", "ground_truth": str(e["answer"])},
                 "extra_info": {"index": i, "split": split, "problem": e["problem"]}} for i, e in enumerate(examples)]
        pq.write_table(pa.Table.from_pylist(rows), folder / (split + ".parquet"))
        with open(folder / (split + ".jsonl"), "w", encoding="utf-8") as f:  # verl reads the parquet, OpenRLHF this
            for e in examples:
                prompt = render_prompt(s.tokenizer, e["prompt"], tags, cfg.data.prefill_reasoning)
                f.write(json.dumps({"prompt": prompt, "answer": str(e["answer"])}, ensure_ascii=False) + "\n")
        counts[split] = len(examples)
    return counts


# verl's SwanLab logger takes its mode from SWANLAB_MODE (default cloud, which waits for a login without a key)
SWANLAB_ENV = {"auto": 'export SWANLAB_MODE=${SWANLAB_MODE:-$([ -n "${SWANLAB_API_KEY:-}" ] && echo cloud || echo offline)}',
               "online": "export SWANLAB_MODE=${SWANLAB_MODE:-cloud}", "offline": "export SWANLAB_MODE=${SWANLAB_MODE:-offline}",
               "local": "export SWANLAB_MODE=${SWANLAB_MODE:-local}"}


def _swanlab_mode(mode: str) -> str:
    """The recipe's tracking.swanlab as verl's SWANLAB_MODE ("auto": online with SWANLAB_API_KEY, else offline)."""
    return SWANLAB_ENV.get(mode, "")


def _write_script(path: Path, what: str, argv: list[str], env: str = "") -> None:
    """An executable launcher, one `--flag value...` per line; arguments after it go to the trainer."""
    lines: list[list[str]] = [argv[:3]]
    for arg in argv[3:]:
        if arg.startswith("--"):
            lines.append([arg])
        else:
            lines[-1].append(arg)
    command = " \\\n  ".join(" ".join(shlex.quote(a) for a in line) for line in lines)
    path.write_text(f"#!/usr/bin/env bash\n# The recipe as {what} GRPO job (written by grpo-playground scale-out).\n"
                    f"set -euo pipefail\n{env + chr(10) if env else ''}{command} \"$@\"\n")
    path.chmod(0o755)


def _readme(s: ScaleOut, folder: Path, counts: dict) -> str:
    start = f"the run's SFT adapter `{s.adapter}` on `{s.base}`" if s.adapter else f"`{s.base}`"
    notes = "\n".join(f"- {n}" for n in s.notes) or "- nothing: every GRPO setting of the recipe has its key"
    return f"""# `{s.cfg.name}` as a verl or OpenRLHF GRPO job

Written by `grpo-playground scale-out`. GRPO starts from {start}; {counts['train']} training prompts
(`{s.cfg.data.grpo_source}`), {counts['test']} held-out (`{s.cfg.data.eval_source}`). Paths are this machine's:
copy the folder (and a local model) to the cluster and fix them, or write it again there.

Where the trainer runs: `pip install --no-deps grpo-playground` (this checkout or its wheel) and `regex`, so
`reward.py` scores with the Playground's own reward functions (tags {list(s.cfg.rewards.tags.as_list())},
weights {dict(s.cfg.rewards.weights)}).

- **verl {VERL_VERSION}**: `bash run_verl.sh` (`verl_grpo.yaml` on top of verl's `ppo_trainer`; add Hydra overrides
  after it, e.g. `trainer.n_gpus_per_node=8`). Prompts are chat messages rendered with the model's template plus the
  recipe's prefill (`custom_chat_template`); `compute_score` logs each reward function beside the total.
- **OpenRLHF {OPENRLHF_VERSION}**: `bash run_openrlhf.sh` (after `ray start --head`); prompts are the exact strings
  the Playground trains on, labels the gold answers; `reward_func` cuts each query to its response.

What does not carry over:
{notes}
"""
