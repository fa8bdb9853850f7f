"""The typed configuration of one run: model, data, LoRA, the SFT and GRPO stages, rewards, tracking.

TRL style: every field carries `metadata={"help": ...}` (the Training tab builds its form from these), and
`validate()` raises `ConfigError` naming the field, the value and a fix. Pure Python: the UI imports this.
Defaults are the seed's numbers (recipes/qwen3-8b.yaml, docs/training.md) on the offline `tiny` model and the generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Optional

from grpo_playground.tags import Tags

BACKENDS = ("auto", "unsloth", "trl")
DTYPES = ("auto", "float32", "bfloat16", "float16")
# Every loss TRL 1.14.2's GRPOTrainer implements (all verified to run on CPU, see platform.md).
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
SCALE_REWARDS = ("group", "batch", "none")
PREFLIGHT_ERROR_ACTIONS = ("pause", "continue")
LOGPROB_PATHS = ("chunked", "full")
WEIGHT_SYNCS = ("merge", "deltas", "lora")
SWANLAB_MODES = ("auto", "offline", "online", "local", "disabled")
LR_SCHEDULERS = ("linear", "cosine", "constant", "constant_with_warmup", "cosine_with_restarts", "polynomial")
OPTIMIZERS = ("adamw_8bit", "adamw_torch", "adamw_torch_fused", "adafactor", "sgd", "paged_adamw_8bit")
ALL_PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class ConfigError(ValueError):
    """A bad value in a run configuration; `path` is the dotted field name (e.g. `grpo.learning_rate`)."""

    def __init__(self, path: str, value, fix: str):
        self.path, self.value, self.fix = path, value, fix
        shown = repr(value)  # a stranger's value is quoted, never echoed whole
        super().__init__(f"{path}={shown if len(shown) <= 120 else shown[:120] + ' ...'}: {fix}")


def _help(text: str, **extra) -> dict:
    return {"help": text, **extra}


def _max_minutes():
    """The time budget of a stage (SFT and GRPO alike): a field of the product's, not of TRL's configs."""
    return field(default=None, metadata=_help(
        "Time budget: stop (and save the adapter) after this many minutes even before max_steps; empty = none."))


def _save_minutes():
    """Checkpoints spaced in a stage's time (SFT and GRPO alike): a field of the product's, not of TRL's configs."""
    return field(default=None, metadata=_help(
        "Also save a resumable checkpoint each time this many minutes of the stage have passed (beside save_steps; "
        "save_total_limit still applies): checkpoints spaced in time whatever the pace; empty = none."))


def _check_minutes(prefix: str, stage) -> None:
    """A stage's max_minutes and save_minutes (the fields above), SFT and GRPO alike."""
    if stage.max_minutes is not None:
        _check_range(f"{prefix}.max_minutes", stage.max_minutes, 0.01, None, "leave it empty for no time budget")
    if stage.save_minutes is not None:
        _check_range(f"{prefix}.save_minutes", stage.save_minutes, 0.001, None,
                     "leave it empty to save every save_steps only")


def _check_choice(path: str, value, choices) -> None:
    if value not in choices:
        raise ConfigError(path, value, f"choose one of {', '.join(map(str, choices))}")


# A week of steps at 0.5 s each is ~1.2 million; 10**20 reached the trainer's schedulers (issue 38).
MAX_STEPS = 1_000_000


def _check_range(path: str, value, low=None, high=None, fix: str = "") -> None:
    if isinstance(value, float) and not math.isfinite(value):  # NaN compares False with every bound
        raise ConfigError(path, value, "give a finite number (not NaN or infinity)")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"at least {low}" if high is None else f"at most {high}" if low is None else f"between {low} and {high}"
        raise ConfigError(path, value, f"must be {bounds}{'; ' + fix if fix else ''}")


@dataclass
class ModelConfig:
    name_or_path: str = field(default="tiny", metadata=_help(
        "Model registry name (tiny, smollm2-135m, qwen3-8b, ...) or a local Hugging Face model folder."))
    backend: Literal["auto", "unsloth", "trl"] = field(default="auto", metadata=_help(
        "auto: Unsloth FastLanguageModel on CUDA when unsloth is installed, else TRL + PEFT (CPU included).",
        choices=BACKENDS))
    load_in_4bit: bool = field(default=False, metadata=_help(
        "Load the base model in 4-bit for the GRPO stage (the seed does: vLLM needs the memory). CUDA only."))
    sft_load_in_4bit: bool = field(default=False, metadata=_help(
        "Load the base model in 4-bit for the SFT stage (QLoRA). The seed trains SFT in 16-bit. CUDA only."))
    load_in_fp8: bool = field(default=False, metadata=_help(
        "Load the base model in FP8 for the GRPO stage (Unsloth's load_in_fp8: H100 or newer): half of 16-bit's "
        "memory, one copy for training and vLLM's rollouts, which vLLM decodes with fast FP8 kernels where 4-bit "
        "(bitsandbytes) decodes slowly. Instead of load_in_4bit.", label="FP8 base weights for GRPO (Unsloth, H100+)"))
    max_seq_length: int = field(default=2048, metadata=_help(
        "Longest prompt + completion the model is loaded for (Unsloth/vLLM context)."))
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = field(default="auto", metadata=_help(
        "Weights dtype: auto = bfloat16 on a GPU that supports it, float32 on CPU.", choices=DTYPES))
    gpu_memory_utilization: Optional[float] = field(default=None, metadata=_help(
        "Share of GPU memory vLLM reserves for rollouts. Empty = sized from the model, batch and lengths (weights, KV "
        "cache of every row, 5 GiB of overhead); the seed sets 0.7. Lower it on out-of-memory."))
    fast_inference: bool = field(default=True, metadata=_help(
        "Generate GRPO rollouts with vLLM through Unsloth when vllm is installed (CUDA only).",
        label="Fast rollouts with vLLM (Unsloth, CUDA only)"))
    gradient_checkpointing: bool = field(default=True, metadata=_help(
        "Recompute activations in the backward pass to save memory (TRL's default). Off is faster when memory "
        "is not the limit (small models, CPU)."))

    def validate(self, prefix: str = "model") -> None:
        if not self.name_or_path.strip():
            raise ConfigError(f"{prefix}.name_or_path", self.name_or_path, "give a registry name such as 'tiny'")
        _check_choice(f"{prefix}.backend", self.backend, BACKENDS)
        _check_choice(f"{prefix}.dtype", self.dtype, DTYPES)
        _check_range(f"{prefix}.max_seq_length", self.max_seq_length, 64, 131072)
        if self.gpu_memory_utilization is not None:
            _check_range(f"{prefix}.gpu_memory_utilization", self.gpu_memory_utilization, 0.05, 0.98,
                         "leave it empty to size it from the model; the seed uses 0.7")
        if self.load_in_fp8 and self.load_in_4bit:
            raise ConfigError(f"{prefix}.load_in_fp8", True, "FP8 and 4-bit are two ways to load the same weights: "
                              f"set {prefix}.load_in_4bit to false, or load_in_fp8 to false")
        if self.load_in_fp8 and self.backend == "trl":
            raise ConfigError(f"{prefix}.load_in_fp8", True, "FP8 loading is Unsloth's: set model.backend to unsloth "
                              "or auto (on a CUDA GPU with unsloth installed), or load_in_fp8 to false")


@dataclass
class DataConfig:
    sft_source: str = field(default="generator:train", metadata=_help(
        "Source spec of the SFT examples (worked solutions in the tag format): generator:train (difficulty: "
        "generator:train?levels=1-3), openmath:PATH, file:PATH?question=col&answer=col&solution=col, hub:ID."))
    grpo_source: str = field(default="generator:train", metadata=_help(
        "Source spec of the GRPO prompts (final answers only): generator:train, gsm8k:PATH.jsonl, dapo:PATH, ..."))
    eval_source: str = field(default="generator:test", metadata=_help(
        "Held-out source spec for pre-flight and evaluation (never trained on)."))
    n_sft: Optional[int] = field(default=None, metadata=_help("Number of SFT examples (empty = all).", label="SFT examples"))
    n_grpo: Optional[int] = field(default=None, metadata=_help("Number of GRPO prompts (empty = all).", label="GRPO prompts"))
    prefill_reasoning: bool = field(default=True, metadata=_help(
        "The chat template opens the assistant turn with the reasoning start tag, so the model never "
        "has to write it (and the rewards do not count it)."))
    register_tags: bool = field(default=True, metadata=_help(
        "Add the four format tags to the tokenizer as ordinary added tokens, so each is one unit. Never as "
        "special tokens: TRL decodes completions with skip_special_tokens and the rewards would not see them."))
    seed: int = field(default=0, metadata=_help("Seed of data sampling and shuffling."))

    def validate(self, prefix: str = "data") -> None:
        from grpo_playground.data.spec import parse_spec

        for name in ("sft_source", "grpo_source", "eval_source"):
            try:
                parse_spec(getattr(self, name))
            except ValueError as exc:
                raise ConfigError(f"{prefix}.{name}", getattr(self, name), str(exc)) from None
        for name in ("n_sft", "n_grpo"):
            value = getattr(self, name)
            if value is not None:
                _check_range(f"{prefix}.{name}", value, 1, None, "leave it empty to use every example")


@dataclass
class LoraSettings:
    r: int = field(default=32, metadata=_help("LoRA rank (seed 32; also vLLM's max_lora_rank).", label="Rank (r)"))
    alpha: int = field(default=64, metadata=_help("LoRA alpha (seed: 2 x rank)."))
    dropout: float = field(default=0.0, metadata=_help("LoRA dropout (0 lets Unsloth use its fast path)."))
    target_modules: list[str] = field(default_factory=lambda: list(ALL_PROJECTIONS), metadata=_help(
        "Projections that get adapters; all seven by default (fewer targets is a known cause of KL blow-ups)."))
    seed: int = field(default=3407, metadata=_help("Seed of adapter initialisation and training (seed 3407)."))

    def validate(self, prefix: str = "lora") -> None:
        _check_range(f"{prefix}.r", self.r, 1, 1024)
        _check_range(f"{prefix}.alpha", self.alpha, 1, 4096, "the seed uses 2 x r")
        _check_range(f"{prefix}.dropout", self.dropout, 0.0, 0.9)
        if not self.target_modules:
            raise ConfigError(f"{prefix}.target_modules", self.target_modules,
                              f"list module names, e.g. {ALL_PROJECTIONS}")


@dataclass
class SFTStage:
    enabled: bool = field(default=True, metadata=_help("Run SFT first: it teaches the format, not the math."))
    num_train_epochs: float = field(default=2.0, metadata=_help("Passes over the SFT data (seed 2; more stiffens the style)."))
    max_steps: int = field(default=-1, metadata=_help("Stop after this many steps (-1 = run the epochs)."))
    learning_rate: float = field(default=2e-4, metadata=_help("SFT learning rate (seed 2e-4)."))
    warmup_steps: int = field(default=5, metadata=_help("Linear warm-up steps (seed 5)."))
    lr_scheduler_type: str = field(default="linear", metadata=_help("Learning-rate schedule.", choices=LR_SCHEDULERS))
    optim: str = field(default="adamw_8bit", metadata=_help(
        "Optimizer (seed adamw_8bit; without bitsandbytes, e.g. on CPU, adamw_torch is used).", choices=OPTIMIZERS))
    weight_decay: float = field(default=0.01, metadata=_help("Weight decay (seed 0.01)."))
    per_device_train_batch_size: int = field(default=1, metadata=_help("Examples per device per step (seed 1).",
                                                                       label="Examples per device per step"))
    gradient_accumulation_steps: int = field(default=1, metadata=_help("Gradient accumulation steps (seed 1)."))
    max_length: int = field(default=2048, metadata=_help("Longest tokenized SFT example; longer ones are truncated."))
    logging_steps: int = field(default=5, metadata=_help("Log metrics every N steps."))
    save_steps: int = field(default=100, metadata=_help("Save a resumable checkpoint every N steps."))
    save_total_limit: int = field(default=2, metadata=_help(
        "Checkpoints kept (older ones are deleted); the comparison's tuned control keeps every one it scores."))
    max_minutes: Optional[float] = _max_minutes()
    save_minutes: Optional[float] = _save_minutes()
    trl_options: dict = field(default_factory=dict, metadata=_help(
        "Any other field of TRL's SFTConfig, by TRL's name: a recipe writes it in this section beside the others."))

    def validate(self, prefix: str = "sft") -> None:
        _check_range(f"{prefix}.num_train_epochs", self.num_train_epochs, 0.0, 1000.0)
        if self.max_steps == 0 or self.max_steps < -1 or self.max_steps > MAX_STEPS:
            raise ConfigError(f"{prefix}.max_steps", self.max_steps,
                              f"give a number from 1 to {MAX_STEPS:,}, or -1 to run the epochs")
        _check_range(f"{prefix}.learning_rate", self.learning_rate, 1e-8, 1e-2, "the seed uses 2e-4")
        _check_range(f"{prefix}.warmup_steps", self.warmup_steps, 0, None)
        _check_choice(f"{prefix}.lr_scheduler_type", self.lr_scheduler_type, LR_SCHEDULERS)
        _check_choice(f"{prefix}.optim", self.optim, OPTIMIZERS)
        _check_range(f"{prefix}.weight_decay", self.weight_decay, 0.0, 1.0)
        for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "logging_steps", "save_steps",
                     "save_total_limit"):
            _check_range(f"{prefix}.{name}", getattr(self, name), 1, None)
        _check_range(f"{prefix}.max_length", self.max_length, 16, 131072)
        _check_minutes(prefix, self)


@dataclass
class GRPOStage:
    enabled: bool = field(default=True, metadata=_help("Run GRPO (after SFT when both are on): it teaches correctness."))
    max_steps: int = field(default=100, metadata=_help("GRPO optimizer steps."))
    learning_rate: float = field(default=5e-6, metadata=_help(
        "GRPO learning rate (seed 5e-6). Too high makes KL explode / NaN logits: halve it."))
    beta: float = field(default=0.04, metadata=_help(
        "KL penalty towards the reference (the adapter-disabled policy; seed 0.04; 0 = no reference, no kl).",
        label="KL weight (beta)"))
    temperature: float = field(default=0.9, metadata=_help("Sampling temperature of rollouts (seed 0.9)."))
    top_p: float = field(default=1.0, metadata=_help("Nucleus sampling of rollouts."))
    num_generations: int = field(default=8, metadata=_help("Completions per prompt: the group G (seed 8).",
                                                           label="Completions per prompt (group size)"))
    loss_type: str = field(default="dr_grpo", metadata=_help(
        "TRL loss: grpo, dr_grpo (seed: no std or length normalisation), dapo (TRL default), bnpo, cispo, "
        "sapo, luspo, vespo.", choices=LOSS_TYPES))
    scale_rewards: str = field(default="group", metadata=_help(
        "Divide advantages by the reward std of the group, of the batch, or not at all (none, Dr. GRPO).",
        choices=SCALE_REWARDS, label="Advantage scaling"))
    epsilon: float = field(default=0.2, metadata=_help("Clipping range of the policy ratio.", label="Clip range (epsilon)"))
    max_completion_length: int = field(default=1024, metadata=_help(
        "Longest completion in tokens (seed 1024; below 512 truncation cuts off the solution tag on real models)."))
    per_device_train_batch_size: int = field(default=8, metadata=_help(
        "Completions per device per step (TRL counts completions, not prompts). Raised to a multiple of "
        "num_generations when needed (as Unsloth does for the seed's 1).", label="Completions per device per step"))
    gradient_accumulation_steps: int = field(default=1, metadata=_help("Gradient accumulation steps (seed 1)."))
    warmup_steps: int = field(default=0, metadata=_help("Linear warm-up steps."))
    lr_scheduler_type: str = field(default="linear", metadata=_help("Learning-rate schedule.", choices=LR_SCHEDULERS))
    optim: str = field(default="adamw_8bit", metadata=_help(
        "Optimizer (seed adamw_8bit; without bitsandbytes adamw_torch is used).", choices=OPTIMIZERS))
    weight_decay: float = field(default=0.01, metadata=_help("Weight decay (seed 0.01)."))
    logging_steps: int = field(default=5, metadata=_help("Log metrics and sample completions every N steps (seed 5)."))
    save_steps: int = field(default=50, metadata=_help("Save a resumable checkpoint every N steps."))
    save_total_limit: int = field(default=2, metadata=_help("Checkpoints kept (older ones are deleted)."))
    max_minutes: Optional[float] = _max_minutes()
    save_minutes: Optional[float] = _save_minutes()
    use_vllm: bool = field(default=True, metadata=_help(
        "Generate with vLLM (colocated) when it is installed and a GPU is present; else model.generate."))
    num_iterations: int = field(default=1, metadata=_help(
        "Gradient steps per batch of rollouts (GRPO's mu; seed 1): above 1 the clipped ratio matters and generation "
        "costs less per update.", label="Gradient steps per rollout batch"))
    top_entropy_quantile: float = field(default=1.0, metadata=_help(
        "Train only on this top fraction of tokens by entropy (1.0 = all; 0.2 keeps the 'forking' tokens where "
        "completions decide, as in Wang et al. 2025). Run here on the TRL backend; Unsloth's own loss was not checked.",
        label="Train on the highest-entropy tokens (share)"))
    mask_truncated_completions: bool = field(default=False, metadata=_help(
        "Exclude completions cut at max_completion_length from the loss (a guard against truncation hacking).",
        label="Leave truncated completions out of the loss"))
    logprobs: str = field(default="chunked", metadata=_help(
        "How per-token log-probs come from the hidden states (TRL + PEFT): chunked (TRL's chunked path over the "
        "vocabulary: memory grows with the chunk, not with rows x length x vocabulary) or full (TRL's default, a "
        "float32 logits tensor over the whole vocabulary). A wrapped output head (registered tags) always uses full.",
        choices=LOGPROB_PATHS, label="Log-prob computation"))
    weight_sync: str = field(default="merge", metadata=_help(
        "How the policy reaches TRL's colocated vLLM each step: merge (TRL's: merge the LoRA, load every weight, "
        "unmerge), deltas (write W + B@A x scale of the LoRA layers only into vLLM's tensors, in place) or lora "
        "(vLLM keeps the base weights and serves the adapter from a LoRA slot, as Unsloth does).",
        choices=WEIGHT_SYNCS, label="vLLM weight sync"))
    preflight_prompts: int = field(default=4, metadata=_help(
        "Pre-flight: held-out prompts sampled (each num_generations times) and scored before GRPO starts."))
    on_preflight_error: str = field(default="pause", metadata=_help(
        "When the pre-flight says ERROR (GRPO would see no signal): pause before GRPO (the run stops; Resume, or "
        "--resume, runs GRPO anyway) or continue (spend the steps, e.g. to watch the collapse).",
        choices=PREFLIGHT_ERROR_ACTIONS, label="When the pre-flight says ERROR"))
    trl_options: dict = field(default_factory=dict, metadata=_help(
        "Any other field of TRL's GRPOConfig, by TRL's name: a recipe writes it in this section beside the others."))

    def generation_batch(self, num_processes: int = 1) -> tuple[int, str]:
        """Per-device batch TRL accepts (its generation batch must divide by num_generations), and why it changed."""
        per_device = self.per_device_train_batch_size
        total = per_device * self.gradient_accumulation_steps * num_processes
        if total % self.num_generations == 0:
            return per_device, ""
        while (per_device * self.gradient_accumulation_steps * num_processes) % self.num_generations:
            per_device += 1
        return per_device, (
            f"grpo.per_device_train_batch_size {self.per_device_train_batch_size} x gradient_accumulation_steps "
            f"{self.gradient_accumulation_steps} x {num_processes} process(es) does not divide by num_generations "
            f"{self.num_generations}: using per_device_train_batch_size {per_device}")

    def validate(self, prefix: str = "grpo") -> None:
        _check_range(f"{prefix}.max_steps", self.max_steps, 1, MAX_STEPS)
        _check_range(f"{prefix}.learning_rate", self.learning_rate, 1e-9, 1e-2,
                     "the seed uses 5e-6; above ~1e-4 KL explodes on real models")
        _check_range(f"{prefix}.beta", self.beta, 0.0, 10.0, "the seed uses 0.04; 0 drops the reference")
        _check_range(f"{prefix}.temperature", self.temperature, 0.01, 5.0, "0.9-1.2 keeps groups diverse")
        _check_range(f"{prefix}.top_p", self.top_p, 0.01, 1.0)
        _check_range(f"{prefix}.num_generations", self.num_generations, 2, 256,
                     "GRPO compares completions within a group: it needs at least 2")
        _check_choice(f"{prefix}.loss_type", self.loss_type, LOSS_TYPES)
        _check_choice(f"{prefix}.scale_rewards", self.scale_rewards, SCALE_REWARDS)
        _check_choice(f"{prefix}.on_preflight_error", self.on_preflight_error, PREFLIGHT_ERROR_ACTIONS)
        _check_choice(f"{prefix}.logprobs", self.logprobs, LOGPROB_PATHS)
        _check_choice(f"{prefix}.weight_sync", self.weight_sync, WEIGHT_SYNCS)
        _check_range(f"{prefix}.epsilon", self.epsilon, 0.0, 1.0)
        _check_range(f"{prefix}.max_completion_length", self.max_completion_length, 8, 131072)
        _check_range(f"{prefix}.num_iterations", self.num_iterations, 1, 64)
        _check_range(f"{prefix}.top_entropy_quantile", self.top_entropy_quantile, 0.01, 1.0,
                     "0.2 trains on the fifth of tokens with the highest entropy; 1.0 on all")
        _check_choice(f"{prefix}.lr_scheduler_type", self.lr_scheduler_type, LR_SCHEDULERS)
        _check_choice(f"{prefix}.optim", self.optim, OPTIMIZERS)
        _check_range(f"{prefix}.weight_decay", self.weight_decay, 0.0, 1.0)
        for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "logging_steps", "save_steps",
                     "save_total_limit", "preflight_prompts"):
            _check_range(f"{prefix}.{name}", getattr(self, name), 1, None)
        _check_range(f"{prefix}.warmup_steps", self.warmup_steps, 0, None)
        _check_minutes(prefix, self)


def _default_weights() -> dict[str, float]:
    from grpo_playground.rewards import DEFAULT_WEIGHTS

    return dict(DEFAULT_WEIGHTS)


@dataclass
class RewardSettings:
    weights: dict[str, float] = field(default_factory=_default_weights, metadata=_help(
        "Enabled reward functions (names from the rewards registry) and their weights; GRPO sums them."))
    tags: Tags = field(default_factory=Tags, metadata=_help(
        "The four format tags, shared by the data, the chat template and the rewards."))
    gate_on_format: bool = field(default=False, metadata=_help(
        "Answer-checking rewards count only when the strict format matches; otherwise they score their lowest "
        "value, so a completion that fails the format never beats a wrong answer (open-instruct's gated reward).",
        label="Gate correctness on format"))
    overlong_buffer: int = field(default=256, metadata=_help(
        "soft_overlong: tokens before grpo.max_completion_length where the punishment starts (DAPO's cache).",
        label="Overlong buffer (tokens)"))
    cosine_max_len: int = field(default=1000, metadata=_help(
        "cosine_scaled: the length in characters where a correct answer's reward has fallen to its lowest (0.5).",
        label="Cosine max length (characters)"))
    repetition_n_grams: int = field(default=3, metadata=_help(
        "repetition_penalty: the n-gram size (words) whose repeats are counted.", label="Repetition n-gram size"))
    repetition_max_penalty: float = field(default=-1.0, metadata=_help(
        "repetition_penalty: the score of a completion that is one n-gram repeated (<= 0).",
        label="Repetition max penalty"))

    def shaping(self, max_completion_length: int):
        """The knobs the shaped rewards read, with the GRPO stage's completion limit (soft_overlong's); a buffer that
        does not fit under the limit is refused while soft_overlong is on."""
        from grpo_playground.rewards.shaping import Shaping

        if self.weights.get("soft_overlong") and self.overlong_buffer >= max_completion_length:
            raise ConfigError("rewards.overlong_buffer", self.overlong_buffer,
                              f"must stay below grpo.max_completion_length ({max_completion_length}) for "
                              "soft_overlong: a quarter of it is a usual choice")
        return Shaping(self.gate_on_format, max_completion_length, self.overlong_buffer, self.cosine_max_len,
                       self.repetition_n_grams, self.repetition_max_penalty)

    def validate(self, prefix: str = "rewards") -> None:
        from grpo_playground.rewards import REWARDS
        from grpo_playground.rewards.guard import MAX_ABS_WEIGHT

        if not any(w != 0 for w in self.weights.values()):
            raise ConfigError(f"{prefix}.weights", self.weights,
                              f"enable at least one reward with a non-zero weight, e.g. {_default_weights()}")
        for name, weight in self.weights.items():
            if name not in REWARDS:
                raise ConfigError(f"{prefix}.weights", name,
                                  f"unknown reward{_did_you_mean(name, REWARDS)}; registered: {', '.join(REWARDS)}")
            _check_range(f"{prefix}.weights.{name}", weight, -MAX_ABS_WEIGHT, MAX_ABS_WEIGHT,
                         "a weight past that overflows the group's mean")
        self.validate_knobs(prefix)

    def validate_knobs(self, prefix: str = "rewards") -> None:
        """The shaped rewards' knobs (the Reward sandbox checks its own boxes with this too)."""
        from grpo_playground.rewards.guard import MAX_ABS_WEIGHT

        _check_range(f"{prefix}.overlong_buffer", self.overlong_buffer, 1, None)
        _check_range(f"{prefix}.cosine_max_len", self.cosine_max_len, 1, None)
        _check_range(f"{prefix}.repetition_n_grams", self.repetition_n_grams, 1, 16)
        _check_range(f"{prefix}.repetition_max_penalty", self.repetition_max_penalty, -MAX_ABS_WEIGHT, 0.0,
                     "a penalty is negative or 0, as open-r1's")


@dataclass
class DoctorSettings:
    stop_on_critical: bool = field(default=False, metadata=_help(
        "Stop the stage with a checkpoint when more steps cannot help: loss or gradient NaN, every group with zero "
        "reward variance, or every completion truncated, for doctor.critical_steps logged steps in a row. The run "
        "says which step to resume from and which setting to turn.", label="Stop on critical"))
    critical_steps: int = field(default=3, metadata=_help(
        "Logged steps in a row a zero-variance or truncation condition must hold before the run stops "
        "(3 at logging_steps 5 = 15 steps; NaN stops at once).", label="Critical for logged steps"))

    def validate(self, prefix: str = "doctor") -> None:
        _check_range(f"{prefix}.critical_steps", self.critical_steps, 1, 1000)


@dataclass
class Tracking:
    swanlab: str = field(default="auto", metadata=_help(
        "SwanLab mode: auto (online when SWANLAB_API_KEY is set, else offline into the run folder for a later "
        "`swanlab sync`), offline, online, local (needs swanlab[dashboard]), disabled.", choices=SWANLAB_MODES))
    project: str = field(default="grpo-playground", metadata=_help("SwanLab project name."))

    def validate(self, prefix: str = "tracking") -> None:
        _check_choice(f"{prefix}.swanlab", self.swanlab, SWANLAB_MODES)
        if not self.project.strip():
            raise ConfigError(f"{prefix}.project", self.project, "give a project name")


@dataclass
class Hardware:
    num_gpus: int = field(default=1, metadata=_help(
        "GPUs for `accelerate launch` (1 = a plain process). Generation batches must divide across them."))
    cpu_threads: int = field(default=1, metadata=_help(
        "torch threads on CPU (1: on a shared 2-core machine more threads made steps 50-300x slower)."))
    gpu_memory_gib: Optional[float] = field(default=None, metadata=_help(
        "GPU memory the run may use, in GiB (22 for a 24 GB card). Set: the run picks checkpointing, 4-bit loading, "
        "micro-batch and vLLM's share to fit it, is capped at it, and is refused before loading when it cannot fit. "
        "Empty: the card's free memory (the plan is logged, nothing is changed or capped).",
        label="GPU memory budget (GiB)"))

    def validate(self, prefix: str = "hardware") -> None:
        _check_range(f"{prefix}.num_gpus", self.num_gpus, 1, 64)
        _check_range(f"{prefix}.cpu_threads", self.cpu_threads, 1, 256)
        if self.gpu_memory_gib is not None:
            _check_range(f"{prefix}.gpu_memory_gib", self.gpu_memory_gib, 2, 4096,
                         "give the card's memory minus ~2 GiB (22 for a 24 GB card), or leave it empty")


# The one table of old recipe keys, renamed to TRL's own (SFTConfig / GRPOConfig): a recipe or `--set` with an old key
# still loads, with a warning naming the new one.
RENAMED_KEYS = {"epochs": "num_train_epochs", "lr_scheduler": "lr_scheduler_type",
                "grad_accum": "gradient_accumulation_steps", "per_device_batch_size": "per_device_train_batch_size"}
# The `sft:` / `grpo:` sections' TRL fields that the product sets from its own settings (training/stages.py): a recipe
# that sets one is told where the value comes from instead.
PRODUCT_KEYS = {
    "output_dir": "the run folder decides it (--run-dir)", "report_to": "set tracking.swanlab",
    "seed": "set lora.seed (it seeds the adapter and both stages)", "use_cpu": "the device decides it",
    "bf16": "set model.dtype", "gradient_checkpointing": "set model.gradient_checkpointing",
    "reward_weights": "set rewards.weights", "vllm_mode": "the product runs TRL's vLLM colocated",
    "vllm_gpu_memory_utilization": "set model.gpu_memory_utilization",
    "vllm_max_model_length": "set model.max_seq_length",
    "resume_from_checkpoint": "resume with --resume (or Resume in the app)",
}
TRL_OPTIONS = "trl_options"  # the stages' field that holds the TRL fields the product does not name

SECTIONS = {"model": ModelConfig, "data": DataConfig, "lora": LoraSettings, "sft": SFTStage, "grpo": GRPOStage,
            "rewards": RewardSettings, "doctor": DoctorSettings, "tracking": Tracking, "hardware": Hardware}


@dataclass
class RunConfig:
    name: str = field(default="run", metadata=_help("Run name: the prefix of the run folder and the SwanLab experiment."))
    model: ModelConfig = field(default_factory=ModelConfig, metadata=_help("Which model and how to load it."))
    data: DataConfig = field(default_factory=DataConfig, metadata=_help("Where SFT, GRPO and eval examples come from."))
    lora: LoraSettings = field(default_factory=LoraSettings, metadata=_help("LoRA adapter shared by both stages."))
    sft: SFTStage = field(default_factory=SFTStage, metadata=_help("Stage 1: supervised fine-tuning on the format."))
    grpo: GRPOStage = field(default_factory=GRPOStage, metadata=_help("Stage 2: GRPO on correctness."))
    rewards: RewardSettings = field(default_factory=RewardSettings, metadata=_help("Reward functions and tags."))
    doctor: DoctorSettings = field(default_factory=DoctorSettings, metadata=_help(
        "The doctor's watch over the metrics: may it stop a run that cannot recover?"))
    tracking: Tracking = field(default_factory=Tracking, metadata=_help("Experiment tracking (SwanLab)."))
    hardware: Hardware = field(default_factory=Hardware, metadata=_help("Processes and threads."))

    def validate(self) -> "RunConfig":
        if not self.name.strip() or len(self.name) > 80 or any(c in self.name for c in "/\\\0"):
            raise ConfigError("name", self.name, "use 1-80 characters without slashes, e.g. 'tiny-cpu'")
        for section in SECTIONS:
            getattr(self, section).validate(section)
        if not (self.sft.enabled or self.grpo.enabled):
            raise ConfigError("sft.enabled", False, "enable at least one stage (sft.enabled or grpo.enabled)")
        if self.grpo.max_completion_length >= self.model.max_seq_length:
            raise ConfigError("grpo.max_completion_length", self.grpo.max_completion_length,
                              f"must stay below model.max_seq_length ({self.model.max_seq_length}) to leave room "
                              "for the prompt: lower it or raise max_seq_length")
        self.rewards.shaping(self.grpo.max_completion_length)  # soft_overlong's buffer fits under the limit
        return self


def _did_you_mean(name: str, candidates) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else ""
