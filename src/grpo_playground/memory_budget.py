"""A GPU memory budget the run keeps: what each stage will hold, the fastest settings that fit, or a refusal.

    plan_memory(cfg, model_config, budget_bytes, backend="unsloth", vllm=True) -> MemoryPlan

A user renting a 24 GB card sets `hardware.gpu_memory_gib: 22` (the Training form's field); empty means the card's
free memory when the job starts. For each stage the plan walks a ladder from the recipe as written to its leanest
form, one memory saver at a time, in the order they cost least speed:

    the recipe as written -> gradient checkpointing -> vLLM's KV cache for one pass of the batch, not two
    -> half the micro-batch (twice the accumulation: same effective batch), again down to one row
    -> 4-bit base weights (Unsloth only) at the recipe's micro-batch, then halved again

and keeps the first step that fits. The job applies the chosen settings (`apply`), caps PyTorch at the budget and
gives vLLM its share of the card from the plan; a recipe whose leanest form does not fit is refused before any
weight loads, with the smallest change that would fit. No torch here: the UI imports it to say what a run will do.

The estimate, per stage (bytes; shapes from the model's config.json, `vllm_memory.shape_from_config`):
    weights      16-bit, or nf4 linears + 16-bit embeddings; shared with vLLM under Unsloth's fast_inference
    LoRA         r x (in + out) per targeted projection: fp32 weight + grad + AdamW state (8-bit AdamW: 2 B)
    activations  micro-batch rows x tokens: every layer's input (checkpointing) or every saved tensor (without)
    logits       float32 log-probs: TRL's chunked path holds ~2,048 tokens' worth, the full path 3 x the batch's
    vLLM         `vllm_memory.engine_bytes` (weights x 1.2, the KV cache, 5 GiB of graphs and workspace)
    outside      3 GiB outside PyTorch's count: CUDA context, cuBLAS / NCCL workspaces, vLLM's graph pool, allocator
                 slack (measured: nvidia-smi's peak was 1.5-1.9 GiB above a 1 GiB term on issue 35's H100 rows)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from grpo_playground.gpu_share import GIB, gib
from grpo_playground.contracts.states import TRAINED_STAGES
from grpo_playground.vllm_memory import engine_bytes, kv_cache_bytes, shape_from_config, weight_bytes

# Calibrated on issue 35's lease (results/gpu/h100_budget35): with 3 GiB every plan bounds nvidia-smi's peak
# (1.7B TRL 23.4 vs 22.9, 1.7B Unsloth 20.1 vs 20.0, 8B Unsloth 21.2 vs 20.7 GiB); with the 1 GiB of a CUDA
# context alone, the 1.7B TRL row went 0.9 GiB over its 22 GiB budget
OUTSIDE_TORCH_BYTES = 3 * GIB
PROMPT_TOKENS = 256  # a math prompt with the system prompt (GSM8K ~100-200 tokens with the seed's system prompt)
LOGPROB_CHUNK_TOKENS = 2048  # TRL's chunked log-probs (grpo_trainer's chunk size)
FULL_LOGITS_FACTOR = 3  # logits, log-softmax and its gradient: the full path's measured peak growth (BENCHMARKS.md)
CHUNKED_LOGITS_FACTOR = 0.5  # measured: 441 MiB at 64 x 128 tokens of a 151,936 vocabulary (BENCHMARKS.md)
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class BudgetError(ValueError):
    """The recipe does not fit the budget even at its leanest; the message gives the smallest change that would."""


@dataclass(frozen=True)
class Settings:
    """The memory knobs of one stage, as the plan sets them."""
    four_bit: bool
    checkpointing: bool
    micro_batch: int
    accumulation: int
    kv_passes: int  # vLLM's KV cache: 2 = the whole generation batch twice over (the default sizing), 1 = once
    fp8: bool = False  # FP8 base weights (Unsloth's load_in_fp8, GRPO): the plan keeps them, never adds 4-bit to them

    def describe(self, vllm: bool) -> str:
        parts = ["4-bit base weights" if self.four_bit else "FP8 base weights" if self.fp8 else "16-bit weights",
                 "gradient checkpointing" if self.checkpointing else "no gradient checkpointing",
                 f"micro-batch {self.micro_batch} x {self.accumulation} accumulation"]
        if vllm:
            parts.append(f"vLLM KV cache for {self.kv_passes} pass{'es' if self.kv_passes > 1 else ''} of the batch")
        return ", ".join(parts)


@dataclass(frozen=True)
class StagePlan:
    stage: str
    settings: Settings
    parts: dict[str, int]  # what holds memory, in bytes
    changed: tuple[str, ...]  # what the plan changed from the recipe, in words
    vllm_bytes: int = 0

    @property
    def total(self) -> int:
        return sum(self.parts.values())


@dataclass(frozen=True)
class MemoryPlan:
    budget: int
    stages: tuple[StagePlan, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def peak(self) -> int:
        return max((s.total for s in self.stages), default=0)

    def stage(self, name: str) -> StagePlan | None:
        return next((s for s in self.stages if s.stage == name), None)

    def vllm_share(self, card_bytes: int) -> float | None:
        """vLLM's gpu_memory_utilization on a card of `card_bytes`: the GRPO engine's planned bytes, rounded up."""
        grpo = self.stage("grpo")
        if grpo is None or not grpo.vllm_bytes:
            return None
        return min(math.ceil(grpo.vllm_bytes / card_bytes * 100) / 100, 0.95)

    def summary(self) -> list[str]:
        lines = [f"memory budget {gib(self.budget)}: peak estimate {gib(self.peak)}"]
        for s in self.stages:
            held = ", ".join(f"{k} {gib(v)}" for k, v in s.parts.items() if v)
            lines.append(f"{s.stage}: {gib(s.total)} ({held}); {s.settings.describe(bool(s.vllm_bytes))}"
                         + (f"; changed from the recipe: {'; '.join(s.changed)}" if s.changed else ""))
        return lines + list(self.notes)


def budget_bytes(cfg) -> int | None:
    """hardware.gpu_memory_gib in bytes (None: no budget set)."""
    return None if cfg.hardware.gpu_memory_gib is None else int(cfg.hardware.gpu_memory_gib * GIB)


def lora_params(shape_config: dict, targets, r: int) -> int:
    """LoRA parameters: r x (in + out) for each targeted projection of each layer."""
    hidden, inter = shape_config["hidden_size"], shape_config["intermediate_size"]
    heads = shape_config["num_attention_heads"]
    kv = shape_config.get("num_key_value_heads") or heads
    head_dim = shape_config.get("head_dim") or hidden // heads
    dims = {"q_proj": (hidden, heads * head_dim), "k_proj": (hidden, kv * head_dim),
            "v_proj": (hidden, kv * head_dim), "o_proj": (heads * head_dim, hidden),
            "gate_proj": (hidden, inter), "up_proj": (hidden, inter), "down_proj": (inter, hidden)}
    return shape_config["num_hidden_layers"] * sum(r * sum(dims[t]) for t in targets if t in dims)


def activation_bytes(shape_config: dict, tokens: int, checkpointing: bool) -> int:
    """16-bit activations kept for the backward pass over `tokens` tokens (flash/SDPA attention: no score matrix)."""
    hidden, inter = shape_config["hidden_size"], shape_config["intermediate_size"]
    heads = shape_config["num_attention_heads"]
    kv = shape_config.get("num_key_value_heads") or heads
    head_dim = shape_config.get("head_dim") or hidden // heads
    # a layer saves its norms' and projections' inputs, q/k/v, the attention output and the MLP's three products
    per_layer = 2 * (4 * hidden + 2 * heads * head_dim + 2 * kv * head_dim + 4 * inter)
    layers = shape_config["num_hidden_layers"]
    if checkpointing:  # each layer's input, plus one layer recomputed at a time
        return tokens * (layers * 2 * hidden + per_layer)
    return tokens * layers * per_layer


def logits_bytes(vocab: int, tokens: int, chunked: bool) -> int:
    if chunked:
        return int(CHUNKED_LOGITS_FACTOR * min(tokens, LOGPROB_CHUNK_TOKENS) * vocab * 4)
    return FULL_LOGITS_FACTOR * tokens * vocab * 4


def stage_parts(cfg, shape_config: dict, stage: str, s: Settings, backend: str, vllm: bool,
                card: int | None = None) -> tuple[dict, int]:
    """What a stage holds under settings `s` (bytes by part), and its vLLM engine's bytes (0 without one). A recipe's
    own model.gpu_memory_utilization is what vLLM takes of the `card` (of the budget when the card is unknown)."""
    shape = shape_from_config(shape_config)
    section = getattr(cfg, stage)
    tokens_per_row = (section.max_length if stage == "sft"
                      else min(cfg.model.max_seq_length, PROMPT_TOKENS + section.max_completion_length))
    adam = 2 if "8bit" in section.optim else 8
    engine = 0
    if stage == "grpo" and vllm:
        rows = section.per_device_train_batch_size * section.gradient_accumulation_steps
        kv_full = kv_cache_bytes(shape, rows, tokens_per_row)  # two passes of the batch
        # vLLM refuses to start without room for one sequence of max_model_len (model.max_seq_length)
        kv = max(kv_full * s.kv_passes // 2, shape["kv_bytes_per_token"] * cfg.model.max_seq_length)
        engine = engine_bytes(shape, rows, tokens_per_row, s.four_bit, s.fp8) - kv_full + kv
        if cfg.model.gpu_memory_utilization is not None:
            engine = int(cfg.model.gpu_memory_utilization * (card or 0))
    shared_weights = engine and backend == "unsloth"  # fast_inference: one copy of the weights for both
    weights = int(weight_bytes(shape, s.four_bit, s.fp8))
    parts = {
        "weights": 0 if shared_weights else weights,
        "LoRA + optimizer": lora_params(shape_config, cfg.lora.target_modules, cfg.lora.r) * (4 + 4 + adam),
        "activations": activation_bytes(shape_config, s.micro_batch * tokens_per_row, s.checkpointing),
        "logits": logits_bytes(shape_config["vocab_size"], s.micro_batch * tokens_per_row,
                               stage == "sft" or section.logprobs == "chunked"),
        "vLLM": engine,
        "CUDA context and workspaces": OUTSIDE_TORCH_BYTES,
    }
    return parts, engine


def ladder(cfg, stage: str, backend: str, vllm: bool) -> list[tuple[Settings, tuple[str, ...]]]:
    """The settings to try, from the recipe as written to its leanest, each with what it changed."""
    section = getattr(cfg, stage)
    four_bit = (cfg.model.sft_load_in_4bit if stage == "sft" else cfg.model.load_in_4bit) and backend == "unsloth"
    per_device = section.generation_batch()[0] if stage == "grpo" else section.per_device_train_batch_size
    fp8 = stage == "grpo" and cfg.model.load_in_fp8 and backend == "unsloth"
    s = Settings(four_bit, cfg.model.gradient_checkpointing, per_device, section.gradient_accumulation_steps, 2, fp8)
    steps, changed = [(s, ())], []
    if not s.checkpointing:
        s = replace(s, checkpointing=True)
        changed.append("gradient checkpointing on")
        steps.append((s, tuple(changed)))
    if stage == "grpo" and vllm and cfg.model.gpu_memory_utilization is None:
        s = replace(s, kv_passes=1)
        changed.append("vLLM's KV cache sized for one pass of the batch")
        steps.append((s, tuple(changed)))
    # Smaller micro-batches before 4-bit weights: vLLM decodes bitsandbytes weights 3.7x slower (issue 35's H100
    # lease: 3,852 against 14,236 generated tok/s on the 1.7B shape), while a micro-batch only splits the backward
    steps += halvings(s, tuple(changed))
    if not s.four_bit and not s.fp8 and backend == "unsloth":
        s = replace(s, four_bit=True)
        changed.append("4-bit base weights")
        steps.append((s, tuple(changed)))
        steps += halvings(s, tuple(changed))
    return steps


def halvings(s: Settings, changed: tuple[str, ...]) -> list[tuple[Settings, tuple[str, ...]]]:
    """`s` with half the micro-batch and twice the accumulation, again and again down to one row."""
    steps = []
    while s.micro_batch > 1:
        s = replace(s, micro_batch=s.micro_batch // 2, accumulation=s.accumulation * 2)
        steps.append((s, changed + (f"micro-batch {s.micro_batch} x {s.accumulation} accumulation "
                                    "(same effective batch)",)))
    return steps


def first_fit(cfg, shape_config: dict, stage: str, budget: int, backend: str, vllm: bool,
              card: int | None = None) -> StagePlan | None:
    """The first rung of the ladder that fits `budget`, or None."""
    for settings, changed in ladder(cfg, stage, backend, vllm):
        parts, engine = stage_parts(cfg, shape_config, stage, settings, backend, vllm, card or budget)
        if sum(parts.values()) <= budget:
            return StagePlan(stage, settings, parts, changed, engine)
    return None


def leanest_need(cfg, shape_config: dict, stage: str, budget: int, backend: str, vllm: bool,
                 card: int | None = None) -> int:
    leanest, _ = ladder(cfg, stage, backend, vllm)[-1]
    return sum(stage_parts(cfg, shape_config, stage, leanest, backend, vllm, card or budget)[0].values())


def plan_stage(cfg, shape_config: dict, stage: str, budget: int, backend: str, vllm: bool,
               card: int | None = None, need: int | None = None) -> StagePlan:
    """The first rung that fits; BudgetError naming the smallest change that would fit otherwise (`need`: the budget
    every stage of the run needs at its leanest, when more than this stage's)."""
    found = first_fit(cfg, shape_config, stage, budget, backend, vllm, card)
    if found is not None:
        return found
    leanest, _ = ladder(cfg, stage, backend, vllm)[-1]
    own = leanest_need(cfg, shape_config, stage, budget, backend, vllm, card)
    change = smallest_change(cfg, shape_config, stage, budget, backend, vllm, max(own, need or 0), card)
    raise BudgetError(f"the {stage} stage needs about {gib(own)} at its leanest ({leanest.describe(vllm)}) and the "
                      f"budget is {gib(budget)}: {change}")


def smallest_change(cfg, shape_config: dict, stage: str, budget: int, backend: str, vllm: bool, need: int,
                    card: int | None = None) -> str:
    """Which one change of the recipe would fit, cheapest first: 4-bit (Unsloth), shorter sequences, a bigger budget."""
    options = []
    if cfg.model.gpu_memory_utilization is not None:
        trial = replace(cfg, model=replace(cfg.model, gpu_memory_utilization=None))
        if first_fit(trial, shape_config, stage, budget, backend, vllm, card):
            options.append("leave model.gpu_memory_utilization empty (sized from the budget)")
    if backend != "unsloth" and first_fit(cfg, shape_config, stage, budget, "unsloth", vllm, card):
        options.append("set model.backend: unsloth (4-bit base weights on a CUDA GPU)")
    length_key = "max_length" if stage == "sft" else "max_completion_length"
    length = getattr(getattr(cfg, stage), length_key)
    while length > 128:
        length //= 2
        trial = replace(cfg, **{stage: replace(getattr(cfg, stage), **{length_key: length})})
        if first_fit(trial, shape_config, stage, budget, backend, vllm, card):
            options.append(f"lower {stage}.{length_key} to {length}")
            break
    options.append(f"raise hardware.gpu_memory_gib to {math.ceil(need / GIB)} (a larger card) or pick a smaller model")
    return "; or ".join(options)


def plan_memory(cfg, shape_config: dict, budget: int, backend: str = "unsloth", vllm: bool = True,
                stages: tuple[str, ...] = TRAINED_STAGES, card: int | None = None) -> MemoryPlan:
    """The plan of each enabled stage of `stages` within `budget` bytes of a `card` (its size when known: a recipe's
    fixed vLLM share is of the card); BudgetError when one cannot fit."""
    enabled = [st for st in stages if getattr(cfg, st).enabled]
    need = max((leanest_need(cfg, shape_config, st, budget, backend, vllm, card) for st in enabled), default=0)
    planned = tuple(plan_stage(cfg, shape_config, st, budget, backend, vllm, card, need) for st in enabled)
    notes = ()
    if backend != "unsloth" and (cfg.model.load_in_4bit or cfg.model.sft_load_in_4bit):
        notes = ("4-bit loading is Unsloth's (model.backend: unsloth): the TRL + PEFT path loads 16-bit weights",)
    return MemoryPlan(budget, planned, notes)


def apply(cfg, plan: MemoryPlan, card_bytes: int | None = None):
    """`cfg` with the plan's settings: checkpointing, 4-bit loading, micro-batch and, on a card, vLLM's share."""
    model, sections = cfg.model, {}
    for s in plan.stages:
        st = s.settings
        sections[s.stage] = replace(getattr(cfg, s.stage), per_device_train_batch_size=st.micro_batch,
                                    gradient_accumulation_steps=st.accumulation)
        model = replace(model, gradient_checkpointing=model.gradient_checkpointing or st.checkpointing,
                        **{"sft_load_in_4bit" if s.stage == "sft" else "load_in_4bit": st.four_bit})
    share = plan.vllm_share(card_bytes) if card_bytes else None
    if share is not None and cfg.model.gpu_memory_utilization is None:
        model = replace(model, gpu_memory_utilization=share)
    return replace(cfg, model=model, **sections)


def planning_backend(cfg) -> str:
    """The backend a GPU job will most likely use, for planning away from the GPU: auto is Unsloth on a GPU image."""
    return "trl" if cfg.model.backend == "trl" else "unsloth"


def budget_note(cfg) -> str:
    """What the Training form says of a recipe's hardware.gpu_memory_gib before Start (markdown); '' without one."""
    from grpo_playground.models.shapes import model_shape

    if cfg.hardware.gpu_memory_gib is None:
        return ""
    budget = budget_bytes(cfg)
    shape = model_shape(cfg.model.name_or_path)
    if shape is None:
        return (f"\n\nThe memory budget ({gib(budget)}) is checked when the job starts on the GPU: "
                f"{cfg.model.name_or_path}'s shape is not known here.")
    try:
        plan = plan_memory(cfg, shape, budget, planning_backend(cfg), cfg.grpo.use_vllm)
    except BudgetError as exc:
        return f"\n\n**Does not fit hardware.gpu_memory_gib:** {exc}"
    return "\n\nOn a GPU (" + planning_backend(cfg) + "): " + "; ".join(plan.summary())
