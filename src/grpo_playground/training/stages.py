"""The two training stages: SFT (TRL SFTTrainer) teaches the format, GRPO (TRL GRPOTrainer) teaches correctness.

Both train a LoRA policy from grpo_playground.training.backend on rows rendered by the data module's chat
template helpers (string prompts: the model trains and samples on exactly the text it will see), write the
run folder through RunCallback, resume from the stage's last checkpoint, and save the final adapter plus
tokenizer in <run>/<stage>/.
"""

from __future__ import annotations

import os
import random
from contextlib import nullcontext
from dataclasses import dataclass

from grpo_playground.config import RunConfig
from grpo_playground.gpu_share import engine_start
from grpo_playground.training.backend import Policy, resolve_optim, vllm_memory_share
from grpo_playground.training.callbacks import RunCallback, SampleRecorder
from grpo_playground.training.multigpu import process_count
from grpo_playground.training.progress import terminal_progress
from grpo_playground.training.rollouts import instrument_grpo
from grpo_playground.training.run_folder import RunFolder
from grpo_playground.step_timing import StepTimer, cuda_sync


@dataclass
class StageResult:
    stage: str
    steps: int
    seconds: float
    stopped_by: str  # "" (ran to the end), "stop" (a stop request), "time" (its time budget), "doctor" (a critical)


def critical_steps(cfg: RunConfig) -> int | None:
    """The doctor's stop window when the recipe lets it stop the run (doctor.stop_on_critical), else None."""
    return cfg.doctor.critical_steps if cfg.doctor.stop_on_critical else None


def training_rows(cfg: RunConfig, tokenizer, stage: str, folder: RunFolder):
    """The stage's dataset: normalized examples -> rendered prompt (and SFT completion) strings."""
    from grpo_playground.data import load_examples, to_hf_dataset
    from grpo_playground.data.chat_template import render_examples
    from grpo_playground.data.preview import stage_source

    spec, n = stage_source(cfg, stage)  # the Training tab's data preview reads the same source
    loaded = load_examples(spec, n=n, tags=cfg.rewards.tags, with_solution=stage == "sft", seed=cfg.data.seed)
    folder.log(f"{stage} data {spec}: {loaded.summary()}")
    examples, read = loaded.examples, rows_read(cfg, stage)
    if read is not None and read < len(examples):
        # a seeded draw, as the trainer's shuffled pass would read them (a file's first rows may be its easiest)
        examples = random.Random(cfg.data.seed).sample(examples, read)
        folder.log(f"{stage}: {read} of them prepared, the most its {getattr(cfg, stage).max_steps} steps read")
    return to_hf_dataset(render_examples(examples, tokenizer, cfg.rewards.tags, cfg.data.prefill_reasoning))


def rows_read(cfg: RunConfig, stage: str) -> int | None:
    """The most rows the stage's steps read: max_steps x its effective batch (GRPO's counted in completions, more
    than its prompts); None when its epochs bound it (max_steps -1). TRL prepares every row before the first step,
    and SFT's tokenization of tiny-cpu's 20,000 took 18 s of one CPU thread, for a run of 2 steps as for 600."""
    section, world = getattr(cfg, stage), max(cfg.hardware.num_gpus, process_count())  # the recipe's, or launched
    if section.max_steps < 0:
        return None
    per_device = section.generation_batch(world)[0] if stage == "grpo" else section.per_device_train_batch_size
    return section.max_steps * per_device * section.gradient_accumulation_steps * world


def trl_kwargs(cfg: RunConfig, stage: str, folder: RunFolder, policy: Policy, **computed) -> dict:
    """Keyword arguments of the stage's TRL config, in layers: the product's defaults; the recipe's section by TRL's
    names (the fields it names, then any other TRL field, from trl_options); the values the product works out from
    them (`computed`, e.g. the GRPO batch raised to a multiple of the group) or owns (config.run_config.PRODUCT_KEYS:
    a recipe cannot set them)."""
    from dataclasses import fields

    from grpo_playground.config.trl_fields import trl_fields

    section = getattr(cfg, stage)
    optim, note = resolve_optim(section.optim)
    if note:
        folder.log(note)
    bf16 = policy.device == "cuda" and str(next(policy.model.parameters()).dtype) == "torch.bfloat16"
    known = trl_fields(stage)
    recipe = {f.name: getattr(section, f.name) for f in fields(section) if f.name in known}
    owned = dict(output_dir=str(folder.checkpoints(stage)), report_to="none", seed=cfg.lora.seed, bf16=bf16,
                 use_cpu=policy.device == "cpu", gradient_checkpointing=cfg.model.gradient_checkpointing)
    defaults = dict(dataloader_num_workers=0, disable_tqdm=True, logging_first_step=True)
    return {**defaults, **recipe, **section.trl_options, "optim": optim, **computed, **owned}


def _train(trainer, folder: RunFolder, stage: str, resume: bool, callback: RunCallback, policy: Policy) -> StageResult:
    import time

    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # RunCallback writes one readable line per log instead
    if trainer.accelerator.is_main_process:
        for progress in terminal_progress(stage):  # a bar with ETA on a terminal; none in a log file
            trainer.add_callback(progress)
    checkpoint = folder.last_checkpoint(stage) if resume else None
    if checkpoint:
        from grpo_playground.training.resume import resume_from

        folder.log(f"{stage}: resuming from {checkpoint.name}")
        resume_from(trainer, checkpoint, lambda message: folder.log(f"{stage}: {message}"))
    started = time.time()
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    seconds = time.time() - started
    if callback.stopped_by not in ("stop", "doctor") and trainer.accelerator.is_main_process:
        target = folder.adapter(stage)
        # Only the trained adapter: TRL may have added a frozen "ref" copy for the KL term.
        trainer.model.save_pretrained(str(target), selected_adapters=["default"])
        policy.tokenizer.save_pretrained(str(target))
        folder.log(f"{stage}: adapter saved in {target}")
    return StageResult(stage, trainer.state.global_step, seconds, callback.stopped_by)


def sft_loss_type(model) -> str:
    """TRL's chunked SFT loss when the output head is a plain Linear, else the plain one.

    `chunked_nll` (TRL 1.14.2's default) reads `lm_head.weight` and `.bias` directly. When the format tags are
    registered on a tied model, PEFT wraps the head in a TrainableTokensWrapper: the chunked loss then crashes
    (`no attribute 'bias'`) and would skip the new rows' delta anyway. `nll` runs the head's own forward.
    """
    import torch

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "chunked_nll" if type(base.get_output_embeddings()) is torch.nn.Linear else "nll"


def sft_config(cfg: RunConfig, folder: RunFolder, policy: Policy):
    """TRL's SFTConfig for the recipe's sft section."""
    from trl import SFTConfig

    defaults = dict(completion_only_loss=True, loss_type=sft_loss_type(policy.model))
    return SFTConfig(**{**defaults, **trl_kwargs(cfg, "sft", folder, policy)})


def run_sft(cfg: RunConfig, folder: RunFolder, policy: Policy, tracker, history: list[dict], resume: bool) -> StageResult:
    from trl import SFTTrainer

    dataset = training_rows(cfg, policy.tokenizer, "sft", folder)
    args = sft_config(cfg, folder, policy)
    timer = StepTimer(cuda_sync())
    callback = RunCallback(folder, "sft", tracker, history, None, cfg.sft.max_minutes, timer, critical_steps(cfg),
                           cfg.sft.save_minutes)
    trainer = SFTTrainer(model=policy.model, args=args, train_dataset=dataset, processing_class=policy.tokenizer,
                         callbacks=[callback])
    timer.wrap(trainer, "training_step", "forward_backward")
    return _train(trainer, folder, "sft", resume, callback, policy)


def grpo_config(cfg: RunConfig, folder: RunFolder, policy: Policy, reward_weights: list[float]):
    """TRL's GRPOConfig for the recipe's grpo section."""
    from trl import GRPOConfig

    g = cfg.grpo
    per_device, note = g.generation_batch(cfg.hardware.num_gpus)
    if note:
        folder.log(note)
    # vLLM rollouts (load_policy decided: Unsloth's fast_inference engine, or TRL's own colocated vLLM on TRL + PEFT)
    use_vllm = policy.rollouts == "vllm"
    share = vllm_memory_share(cfg, policy.model.config.to_dict()) if use_vllm and policy.backend == "trl" else None
    if share is not None:
        folder.log(f"grpo: rollouts with TRL's colocated vLLM, gpu_memory_utilization {share}")
    return GRPOConfig(**trl_kwargs(
        cfg, "grpo", folder, policy, per_device_train_batch_size=per_device, reward_weights=reward_weights,
        use_vllm=use_vllm, vllm_mode="colocate", vllm_max_model_length=cfg.model.max_seq_length,
        **({"vllm_gpu_memory_utilization": share} if share is not None else {})))


def run_grpo(cfg: RunConfig, folder: RunFolder, policy: Policy, tracker, history: list[dict], resume: bool) -> StageResult:
    from trl import GRPOTrainer

    from grpo_playground.rewards import get_reward_funcs
    from grpo_playground.training.grpo_trainer import PlaygroundGRPOTrainer

    g = cfg.grpo
    dataset = training_rows(cfg, policy.tokenizer, "grpo", folder)
    shaping = cfg.rewards.shaping(g.max_completion_length)
    funcs, weights = get_reward_funcs(cfg.rewards.weights, cfg.rewards.tags, shaping)
    recorder = SampleRecorder(funcs, weights, g.num_generations, g.scale_rewards)
    args = grpo_config(cfg, folder, policy, list(weights))
    if args.use_vllm and policy.backend == "trl":
        # TRL's colocated engine must live in this process (external_launcher), not in vLLM's engine subprocess
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    timer = StepTimer(cuda_sync())
    callback = RunCallback(folder, "grpo", tracker, history, recorder, g.max_minutes, timer, critical_steps(cfg),
                           g.save_minutes)
    # TRL + PEFT: the product's trainer (no forward twice, chunked log-probs, the chosen vLLM sync); Unsloth its own
    options = dict(logprobs=g.logprobs, weight_sync=g.weight_sync) if policy.backend == "trl" else {}
    # TRL's colocated engine starts in the trainer: alone on the GPU meanwhile (a chat server starting beside it
    # would be counted as its own growth when it sizes its KV cache)
    starting = engine_start(f"the GRPO job of run {cfg.name}", folder.log) if args.use_vllm and policy.backend == "trl" \
        else nullcontext()
    with starting:
        trainer = (PlaygroundGRPOTrainer if options else GRPOTrainer)(
            model=policy.model, reward_funcs=recorder.funcs, args=args, train_dataset=dataset,
            processing_class=policy.tokenizer, callbacks=[callback], **options)
    timer.wrap(trainer, "training_step", "forward_backward")  # outermost: the phases below nest inside it
    instrument_grpo(trainer, policy.backend, timer)
    return _train(trainer, folder, "grpo", resume, callback, policy)
