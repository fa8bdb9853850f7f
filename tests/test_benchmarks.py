"""CPU-side checks of the GPU benchmark (parsing, table, recipes) and of the multi-GPU launch plumbing.

The GPU numbers themselves come from the device runs recorded in results/gpu/ (BENCHMARKS.md).
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import pytest

from benchmarks import gpu_grpo
from grpo_playground.models.shapes import QWEN3, QWEN3_COMMON
from grpo_playground.training import multigpu
from grpo_playground.training.rollouts import SLOW_ROLLOUTS_ENV, keeps_cache


def _rows(step_times, rollout_s, tokens, num_tokens):
    return [{"stage": "grpo", "step": i + 1, "timing/step_s": st, "timing/rollout_s": rs, "rollout/tokens": tk,
             "timing/forward_backward_s": st - rs, "num_tokens": nt, "completions/mean_length": tk / 8,
             "gpu/peak_gib": 1.0 + i}
            for i, (st, rs, tk, nt) in enumerate(zip(step_times, rollout_s, tokens, num_tokens))]


def test_summarize_leaves_out_the_warmup_steps_and_scales_rollouts_by_process_count():
    # step 1 is a 30 s warm-up (compile, allocator): it must not leak into the medians
    rows = _rows([30.0, 2.0, 4.0, 6.0], [25.0, 1.0, 3.0, 5.0], [1024.0] * 4, [2000.0, 4000.0, 6000.0, 8000.0])
    rows.insert(0, {"stage": "sft", "step": 5, "timing/step_s": 99.0})  # other stage: ignored
    one = gpu_grpo.summarize(rows, num_gpus=1, warmup=1)
    assert one["steps_logged"] == 4 and one["warmup_steps_s"] == [30.0] and one["steps_measured"] == 3
    assert one["step_s"] == 4.0 and one["p90_step_s"] == 6.0
    assert one["phases_s"]["rollout"] == 3.0 and one["phases_s"]["forward_backward"] == 1.0
    assert one["gen_tok_s"] == pytest.approx(3 * 1024 / 9.0)  # tokens over rollout seconds of steps 2-4
    assert one["trained_tok_s"] == pytest.approx(statistics_median([2000 / 2.0, 2000 / 4.0, 2000 / 6.0]))
    assert one["torch_peak_gib"] == 4.0
    two = gpu_grpo.summarize(rows, num_gpus=2, warmup=1)  # the main process logs its own share only
    assert two["gen_tok_s"] == pytest.approx(2 * one["gen_tok_s"])
    assert gpu_grpo.summarize(rows, 1)["warmup_steps_s"] == [30.0, 2.0, 4.0]  # the default: 3 warm-up steps
    assert gpu_grpo.summarize([{"stage": "grpo", "loss": 0.1}], 1) == {"steps_logged": 0}


def test_report_names_the_issue_fields():
    result = {"label": "x", "mode": "trl-vllm", "model": "m", "completion": 128, "state": "finished",
              **gpu_grpo.summarize(_rows([9.0, 1.0, 1.2, 0.8, 1.1], [8.0, 0.3, 0.4, 0.3, 0.3], [8192.0] * 5,
                                         [1.0] * 5), 1), "smi_peak_gib": 12.5}
    entry = gpu_grpo.report([result])["runs"]["x"]
    assert entry["median_step_s"] == pytest.approx(0.95) and entry["peak_gib"] == 12.5 and entry["steps_measured"] == 2
    assert entry["phases_s"]["rollout"] == 0.3 and entry["gen_tok_s"] == pytest.approx(8192 * 2 / 0.6)


def test_report_merge_keeps_the_earlier_leases_rows(tmp_path):
    """Issue 24's rows come from several leases into one results/gpu/grpo_step.json: a new lease's report must not
    drop the rows it did not re-measure."""
    result = {"label": "x", "mode": "trl-vllm", "model": "m", "completion": 128, "state": "finished",
              **gpu_grpo.summarize(_rows([9.0, 1.0, 1.2, 0.8, 1.1], [8.0, 0.3, 0.4, 0.3, 0.3], [8192.0] * 5,
                                         [1.0] * 5), 1)}
    (tmp_path / "d" / "results").mkdir(parents=True)
    (tmp_path / "d" / "results" / "x.json").write_text(json.dumps(result))
    out = tmp_path / "grpo_step.json"
    out.write_text(json.dumps({"runs": {"earlier": {"median_step_s": 1.9}, "x": {"median_step_s": 99.0}}}))
    assert gpu_grpo.main(["report", str(tmp_path / "d"), "--out", str(out), "--merge"]) == 0
    runs = json.loads(out.read_text())["runs"]
    assert runs["earlier"] == {"median_step_s": 1.9} and runs["x"]["median_step_s"] == pytest.approx(0.95)
    assert gpu_grpo.main(["report", str(tmp_path / "d"), "--out", str(out)]) == 0  # without --merge: this lease only
    assert list(json.loads(out.read_text())["runs"]) == ["x"]
    # a row stopped after its first (compiling) step does not replace the same row measured at an earlier lease
    (tmp_path / "d" / "results" / "x.json").write_text(json.dumps({**result, "state": "stopped"}))
    (tmp_path / "d" / "results" / "new.json").write_text(json.dumps({**result, "label": "new", "state": "failed"}))
    assert gpu_grpo.main(["report", str(tmp_path / "d"), "--out", str(out), "--merge"]) == 0
    runs = json.loads(out.read_text())["runs"]
    assert runs["x"]["state"] == "finished" and runs["new"]["state"] == "failed"


def statistics_median(values):
    import statistics

    return statistics.median(values)


def _result(mode, step_s, gen, model="m", num_gpus=1, state="finished"):
    return {"label": f"{mode}{num_gpus}", "model": model, "mode": mode, "completion": 128, "prompts": 8,
            "generations": 8, "num_gpus": num_gpus, "state": state, "step_s": step_s, "gen_tok_s": gen,
            "floor_tok_s": 10000.0}


def test_table_ratios_are_against_the_trl_run_of_the_same_shape():
    results = [_result("trl", 4.0, 1000.0), _result("unsloth", 2.0, 5000.0), _result("trl", 1.0, 100.0, model="other"),
               _result("trl", 2.5, 1800.0, num_gpus=2), _result("unsloth-vllm", None, None, state="failed")]
    text = gpu_grpo.table(results)
    lines = {line.split("|")[5].strip() + line.split("|")[4].strip(): line for line in text.splitlines()[2:]
             if line.split("|")[1].strip() == "m"}
    unsloth = lines["(b) Unsloth bf161"].split("|")
    assert unsloth[10].strip() == "2.00" and unsloth[11].strip() == "5.00"  # step 4/2, gen 5000/1000
    assert unsloth[13].strip() == "50.00"  # 5000 of a 10000 tok/s floor
    two_gpu = lines["(a) TRL+PEFT bf16, HF generate2"].split("|")
    assert two_gpu[10].strip() == "1.00"  # its own (a) row exists: the 2-GPU baseline is itself
    assert "failed" in lines["(d) Unsloth bf16, vLLM fast_inference1"]


def test_table_compares_a_multi_gpu_run_without_own_baseline_with_one_gpu():
    results = [_result("trl", 4.0, 1000.0), _result("unsloth", 2.0, 3000.0, num_gpus=2)]
    row = [line for line in gpu_grpo.table(results).splitlines() if "Unsloth" in line][0].split("|")
    assert row[11].strip() == "3.00"


def test_decode_floor_counts_every_weight_once_per_step():
    census = {"params": 1_000_000_000, "embedding_params": 200_000_000}
    bf16 = gpu_grpo.decode_floor(census, four_bit=False, rows=64)
    assert bf16["weight_bytes"] == 2_000_000_000
    assert bf16["floor_tok_s"] == pytest.approx(64 * 4.3e12 / 2e9)
    nf4 = gpu_grpo.decode_floor(census, four_bit=True, rows=64)
    assert nf4["weight_bytes"] == pytest.approx(200e6 * 2 + 800e6 * 0.5625)  # embeddings stay 16-bit
    h100 = gpu_grpo.decode_floor(census, four_bit=False, rows=64, card="NVIDIA H100 80GB HBM3")
    assert h100["floor_tok_s"] == pytest.approx(64 * 3.0e12 / 2e9)  # the H100's measured copy bandwidth


def test_table_never_compares_runs_on_different_cards():
    results = [_result("trl", 4.0, 1000.0) | {"card": "NVIDIA H200"},
               _result("unsloth", 2.0, 3000.0) | {"card": "NVIDIA H100 80GB HBM3"}]
    row = [line for line in gpu_grpo.table(results).splitlines() if "Unsloth" in line][0].split("|")
    assert "(H100 80GB HBM3)" in row[1] and row[10].strip() == "-"  # no step ratio against the H200's baseline


def test_weight_census_reads_safetensors_headers(tmp_path):
    header = {"model.embed_tokens.weight": {"dtype": "BF16", "shape": [100, 8], "data_offsets": [0, 1600]},
              "model.layers.0.mlp.up_proj.weight": {"dtype": "BF16", "shape": [16, 8], "data_offsets": [1600, 1856]},
              "__metadata__": {"format": "pt"}}
    raw = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(1856))
    assert gpu_grpo.weight_census(tmp_path) == {"params": 928, "embedding_params": 800}
    with pytest.raises(ValueError, match="no .safetensors"):
        gpu_grpo.weight_census(tmp_path / "missing")


def test_recipes_are_valid_product_recipes(tmp_path):
    from grpo_playground.config import load_recipe

    spec = gpu_grpo.RunSpec("smollm2-135m", "unsloth-4bit", 1024, prompts=16, steps=4, num_gpus=2)
    cfg = load_recipe(gpu_grpo.write_recipe(spec, "smollm2-135m", tmp_path / "r.yaml"))
    assert (cfg.model.backend, cfg.model.load_in_4bit, cfg.model.fast_inference) == ("unsloth", True, False)
    assert cfg.grpo.per_device_train_batch_size * cfg.hardware.num_gpus == 16 * 8
    assert cfg.grpo.max_completion_length == 1024 < cfg.model.max_seq_length
    assert not cfg.sft.enabled and cfg.tracking.swanlab == "disabled" and cfg.grpo.logging_steps == 1
    assert not cfg.data.register_tags  # vLLM's copy of the model must keep the vocabulary
    vllm = load_recipe(gpu_grpo.write_recipe(gpu_grpo.RunSpec("m", "unsloth-vllm", 256), "tiny", tmp_path / "v.yaml"))
    assert vllm.grpo.use_vllm and vllm.model.fast_inference and vllm.model.backend == "unsloth"


def test_shape_models_need_the_models_folder():
    with pytest.raises(ValueError, match="--models"):
        gpu_grpo.model_location(gpu_grpo.RunSpec("qwen3-0.6b-shape", "trl", 256), None)
    assert gpu_grpo.model_location(gpu_grpo.RunSpec("smollm2-135m", "trl", 256), None) == "smollm2-135m"


def test_published_shapes_have_the_published_sizes():
    # parameter count of a Qwen3 config, tied embeddings: embedding + layers (q, k, v, o, mlp, 4 norms) + final norm
    def count(c):
        h, i, L, heads, kv, d = (c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"],
                                 c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"])
        layer = h * heads * d * 2 + h * kv * d * 2 + 3 * h * i + 2 * h + 2 * d
        return c["vocab_size"] * h + L * layer + h
    assert round(count(gpu_grpo.SHAPES["qwen3-0.6b-shape"]) / 1e9, 2) == 0.6
    assert round(count(gpu_grpo.SHAPES["qwen3-1.7b-shape"]) / 1e9, 2) == 1.72
    assert round(count(QWEN3["Qwen/Qwen3-4B"]) / 1e9, 2) == 4.02  # the model card's 4.0B
    untied = QWEN3["Qwen/Qwen3-8B"]  # untied: its lm_head is a second vocabulary x hidden matrix
    assert round((count(untied) + untied["vocab_size"] * untied["hidden_size"]) / 1e9, 2) == 8.19  # the card's 8.2B


def test_memory_sampler_keeps_the_peak_per_gpu():
    sampler = gpu_grpo.MemorySampler.__new__(gpu_grpo.MemorySampler)
    sampler.peak, sampler.proc = {}, None
    for line in ("0, 1000\n", "1, 500\n", "0, 3000\n", "0, 2000\n", "garbage\n", "[N/A], 5\n"):
        sampler.feed(line)
    assert sampler.stop() == {0: 3000, 1: 500}


def test_suites_give_one_lane_per_gpu_and_ask_for_every_mode():
    qwen = gpu_grpo.suite("qwen")
    assert len(qwen) == 2 and {s.model for s in qwen[0]} == {"qwen3-0.6b-shape"}
    assert {(s.mode, s.completion) for s in qwen[1]} == {(m, L) for m in ("trl", "unsloth", "unsloth-4bit")
                                                        for L in (256, 1024)}
    assert [s.num_gpus for s in gpu_grpo.suite("scaling")[0]] == [1, 2]
    with pytest.raises(ValueError, match="unknown suite"):
        gpu_grpo.suite("nope")


# ---------------------------------------------------------------------------------------------- multi-GPU
def test_accelerate_command_line():
    command = multigpu.accelerate_command(2, "pipelines.train", ["--config", "r.yaml"], port=29555)
    assert command[:3] == [sys.executable, "-m", "accelerate.commands.launch"]
    assert command[command.index("--num_processes") + 1] == "2"
    assert command[command.index("--main_process_port") + 1] == "29555"
    assert "--multi_gpu" in command and command[-4:] == ["-m", "pipelines.train", "--config", "r.yaml"]
    assert "--multi_gpu" not in multigpu.accelerate_command(1, "m", [])
    with pytest.raises(ValueError):
        multigpu.accelerate_command(0, "m", [])


def test_relaunch_only_for_several_gpus_and_never_twice(monkeypatch):
    for var in multigpu.RANK_ENV:
        monkeypatch.delenv(var, raising=False)
    assert multigpu.relaunch_command(1, "pipelines.train", [], visible_gpus=8) is None
    assert multigpu.relaunch_command(2, "pipelines.train", ["--x"], visible_gpus=2)[-3:] == ["-m", "pipelines.train", "--x"]
    with pytest.raises(ValueError, match="hardware.num_gpus=4 but this machine shows 2"):
        multigpu.relaunch_command(4, "pipelines.train", [], visible_gpus=2)
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert multigpu.relaunch_command(2, "pipelines.train", [], visible_gpus=2) is None  # already launched


def test_train_cli_refuses_more_gpus_than_the_machine_has(tmp_path, monkeypatch, capsys):
    from grpo_playground.cli.train import main  # in this process: a child pays ~7 s of imports for this refusal

    for var in multigpu.RANK_ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # main() points it at the run folder
    spec = gpu_grpo.RunSpec("tiny", "trl", 64, prompts=2, num_gpus=2)
    recipe = gpu_grpo.write_recipe(spec, "tiny", tmp_path / "r.yaml")
    assert main(["--config", str(recipe), "--run-dir", str(tmp_path / "run")]) == 2
    assert "hardware.num_gpus=2 but this machine shows 0 CUDA GPU(s)" in capsys.readouterr().err


def _env():
    import os

    return {k: v for k, v in os.environ.items() if k not in multigpu.RANK_ENV}


def test_only_the_main_process_writes_the_run_folder(tmp_path, monkeypatch):
    from grpo_playground.training.run_folder import RunFolder

    monkeypatch.setenv("RANK", "1")
    other = RunFolder(tmp_path)
    other.status(state="running")
    other.append("metrics.jsonl", {"step": 1})
    other.write_json("preflight.json", {"ok": True})
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    monkeypatch.setenv("RANK", "0")
    RunFolder(tmp_path).append("metrics.jsonl", {"step": 1})
    assert (tmp_path / "metrics.jsonl").read_text().count("step") == 1


def test_any_process_without_a_process_group_is_the_local_flag():
    assert multigpu.any_process(True) is True and multigpu.any_process(False) is False


def test_rollouts_keep_the_cache_only_on_plain_hf_generation(monkeypatch):
    monkeypatch.delenv(SLOW_ROLLOUTS_ENV, raising=False)
    assert keeps_cache("trl", use_vllm=False)
    assert not keeps_cache("trl", use_vllm=True) and not keeps_cache("unsloth", use_vllm=False)
    monkeypatch.setenv(SLOW_ROLLOUTS_ENV, "1")
    assert not keeps_cache("trl", use_vllm=False)


def test_instrumented_rollouts_generate_with_the_kv_cache_under_gradient_checkpointing(monkeypatch):
    """A real (random, small) Qwen3 with LoRA in training mode with checkpointing on, as TRL leaves it."""
    from types import SimpleNamespace

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from grpo_playground.training.rollouts import instrument_grpo
    from grpo_playground.step_timing import StepTimer

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, eos_token_id=None)
    model = get_peft_model(Qwen3ForCausalLM(config), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    model.gradient_checkpointing_enable()
    model.enable_input_require_grads()
    model.train()
    seen = []
    model.get_input_embeddings().register_forward_hook(lambda m, i, o: seen.append(i[0].shape[1]))

    def generate_single_turn(prompt_ids):
        out = model.generate(input_ids=prompt_ids, max_new_tokens=6, do_sample=False, use_cache=True)
        return [row[prompt_ids.shape[1]:].tolist() for row in out], None

    def rollout(prompts, slow):
        monkeypatch.setenv(SLOW_ROLLOUTS_ENV, "1" if slow else "0")
        trainer = SimpleNamespace(model=model, args=SimpleNamespace(gradient_checkpointing_kwargs=None),
                                  use_vllm=False, _generate_single_turn=generate_single_turn)
        timer = StepTimer()
        instrument_grpo(trainer, "trl", timer)
        seen.clear()
        timer.begin_step()
        ids, _ = trainer._generate_single_turn(prompts)
        return ids, list(seen), timer.end_step()

    prompts = torch.randint(0, 64, (2, 5))
    with torch.no_grad():  # the reference: no cache at all, every step recomputes the whole sequence
        model.eval()
        reference = [r[5:].tolist() for r in model.generate(input_ids=prompts, max_new_tokens=6, do_sample=False,
                                                            use_cache=False)]
        model.train()
    slow_ids, slow_lengths, _ = rollout(prompts, slow=True)
    fast_ids, fast_lengths, metrics = rollout(prompts, slow=False)
    assert slow_lengths == fast_lengths == [5, 1, 1, 1, 1, 1]  # generate feeds one new token per step either way
    assert fast_ids == reference  # with the cache kept, the same tokens as the full recompute
    assert slow_ids != reference  # TRL's default: layers drop the cache, tokens lose their context
    assert metrics["rollout/tokens"] == 12.0 and metrics["timing/rollout_s"] > 0
    assert model.is_gradient_checkpointing and model.training  # training keeps checkpointing


def test_lanes_take_turns_when_there_are_fewer_gpus(monkeypatch, tmp_path):
    ran = []
    monkeypatch.setattr(gpu_grpo, "run_one", lambda spec, out, models, gpus, timeout: ran.append((spec.model, gpus))
                        or {"state": "finished", "label": spec.label})
    lanes = [[gpu_grpo.RunSpec("a", "trl", 8)], [gpu_grpo.RunSpec("b", "trl", 8)]]
    gpu_grpo.run_lanes(lanes, tmp_path, None, ["3"], timeout_s=10)
    assert ran == [("a", "3"), ("b", "3")]
    ran.clear()
    gpu_grpo.run_lanes(lanes, tmp_path, None, ["3"], timeout_s=10, deadline_s=30)  # under 45 s left: nothing starts
    assert ran == []


def test_a_lane_skips_the_rows_of_a_mode_that_could_not_import_and_survives_a_script_error(monkeypatch, tmp_path):
    """The 8B lane: a 4-bit row whose import chain lacks a module fails its second row the same way (10 minutes of
    an 8B start each); an exception in this script (a half-written model folder) must not end the lane's thread."""
    ran = []

    def fake(spec, out, models, gpus, timeout):
        ran.append(spec.label)
        if spec.model == "broken":
            raise ValueError("models/broken holds no .safetensors weights")
        if spec.mode == "recipe":
            return {"state": "failed", "label": spec.label, "reason": "",
                    "log_tail": "ModuleNotFoundError: No module named 'humming'\n"}
        return {"state": "finished", "label": spec.label, "reason": ""}

    monkeypatch.setattr(gpu_grpo, "run_one", fake)
    lane = [gpu_grpo.RunSpec("broken", "trl-vllm", 8), gpu_grpo.RunSpec("m", "recipe", 8, vllm_share=0.12),
            gpu_grpo.RunSpec("m", "recipe", 8), gpu_grpo.RunSpec("m", "trl-vllm", 8)]
    results = gpu_grpo.run_lanes([lane], tmp_path, None, ["0"], timeout_s=10)
    assert ran == [lane[0].label, lane[1].label, lane[3].label]  # the second 4-bit row never starts
    assert [r["state"] for r in results] == ["error", "failed", "finished"]
    assert "holds no .safetensors" in results[0]["reason"]


@pytest.mark.slow
def test_grpo_job_runs_as_two_ddp_processes_that_write_one_run_folder(tmp_path):
    """The multi-GPU launch line, on two CPU processes (gloo): one run folder, metrics written once, tokens of both."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    model_dir = tmp_path / "model"
    torch.manual_seed(0)
    config = dict(QWEN3_COMMON, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_window_layers=2)
    Qwen3ForCausalLM(Qwen3Config(**config)).save_pretrained(model_dir)
    for f in gpu_grpo.qwen3_tokenizer_files().iterdir():
        (model_dir / f.name).write_bytes(f.read_bytes())
    spec = gpu_grpo.RunSpec(str(model_dir), "trl", 8, prompts=1, steps=2)
    recipe = gpu_grpo.write_recipe(spec, str(model_dir), tmp_path / "r.yaml")
    recipe.write_text(recipe.read_text().replace("dtype: bfloat16", "dtype: float32"))
    run_dir = tmp_path / "run"
    command = multigpu.accelerate_command(2, "pipelines.train", ["--config", str(recipe), "--stage", "grpo",
                                                                  "--run-dir", str(run_dir)])
    done = subprocess.run(command, capture_output=True, text=True, timeout=500,
                          env={**_env(), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "SWANLAB_MODE": "disabled"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]  # one writer: no duplicated rows from the second process
    # each process takes its own prompt (8 completions) per step: 2 steps x 2 processes of the prompts prepared, as
    # many as 2 steps of 8 completions on 2 processes could read (stages.rows_read); a single process: 2 of them
    assert rows[-1]["epoch"] == pytest.approx(2 * 2 / (2 * 8 * 2))
    assert (run_dir / "grpo" / "adapter_config.json").is_file()


def test_the_bundle_carries_vllms_quantization_pins_from_the_gpu_requirements():
    """Unsloth 4-bit + vLLM failed at load for want of these (results/gpu/grpo_step.json): the carried bundle and the
    GPU image's requirements name the same versions."""
    import re

    root = gpu_grpo.ROOT
    pins = dict(re.findall(r"^([\w-]+)(?:\[\w+\])?==(\S+)", (root / "requirements-gpu.txt").read_text(), re.M))
    script = (root / "benchmarks" / "build_bundles.sh").read_text()
    for name in ("compressed-tensors", "loguru", "humming-kernels", "pyelftools"):
        assert f"{name}=={pins[name]}" in script, name


def test_issue_24_suites_ask_for_the_target_rows():
    small = gpu_grpo.suite("targets")[0]
    assert [(s.model, s.prompts, s.generations, s.completion) for s in small] == [
        ("qwen3-1.7b-shape", 8, 8, 512), ("smollm2-135m", 8, 8, 128), ("smollm2-135m", 8, 8, 128),
        ("smollm2-135m", 8, 8, 128)]
    assert [s.mode for s in small if s.model == "smollm2-135m"] == ["trl-vllm-deltas", "trl-vllm", "trl-vllm-lora"]
    assert all(s.steps - gpu_grpo.WARMUP_STEPS >= 20 for s in small)
    big = gpu_grpo.suite("targets-8b")[0]
    assert all((s.model, s.prompts, s.completion, s.recipe) == ("qwen3-8b-shape", 1, 1024, gpu_grpo.SEED_RECIPE)
               for s in big)
    assert [s.mode for s in big] == ["recipe", "trl-vllm", "recipe"] and big[2].vllm_share is None
    assert all(s.steps - gpu_grpo.WARMUP_STEPS >= 8 for s in big)
    assert len({s.label for s in small + big}) == len(small + big)


def test_the_budget_suite_keeps_a_rented_cards_22_gib_and_reports_the_plan_beside_the_peak(tmp_path):
    from grpo_playground.config import load_recipe

    (lane,) = gpu_grpo.suite("budget")
    assert {s.budget_gib for s in lane} == {22} and len({s.label for s in lane}) == len(lane)
    assert sorted((s.model, s.prompts, s.completion) for s in lane) == [("qwen3-1.7b-shape", 8, 512)] * 2 + [
        ("qwen3-8b-shape", 1, 1024)] * 2
    for spec in lane:  # every row's recipe carries the budget to the job
        recipe = load_recipe(gpu_grpo.write_recipe(spec, "/models/m", tmp_path / f"{spec.label}.yaml"))
        assert recipe.hardware.gpu_memory_gib == 22
    row = {"label": "x", "model": "qwen3-1.7b-shape", "completion": 512, "prompts": 8, "generations": 8, "num_gpus": 1,
           "mode": "trl-vllm-deltas", "state": "finished", "smi_peak_gib": 20.9, "budget_gib": 22, "planned_gib": 12.9}
    assert "20.9 / - (budget 22, plan 12.9)" in gpu_grpo.table([row])
    assert gpu_grpo.PLANNED_PEAK.findall("memory: memory budget 22.0 GiB: peak estimate 12.9 GiB") == ["12.9"]


def test_a_shipped_recipe_row_changes_only_the_model_path_steps_and_offline_needs(tmp_path):
    from dataclasses import asdict

    from grpo_playground.config import load_recipe

    def flat(cfg):
        return {f"{section}.{k}": v for section, values in asdict(cfg).items() if isinstance(values, dict)
                for k, v in values.items()}

    shipped = flat(load_recipe(gpu_grpo.SEED_RECIPE))
    spec = gpu_grpo.RunSpec("qwen3-8b-shape", "recipe", 1024, prompts=1, steps=11, recipe=gpu_grpo.SEED_RECIPE)
    written = flat(load_recipe(gpu_grpo.write_recipe(spec, "/models/q8", tmp_path / "r.yaml")))
    changed = {k for k in shipped if shipped[k] != written[k]}
    assert changed == {"model.name_or_path", "grpo.max_steps", "sft.enabled", "data.grpo_source", "data.n_grpo",
                       "data.eval_source",
                       "grpo.logging_steps", "grpo.save_steps", "grpo.preflight_prompts", "grpo.on_preflight_error",
                       "tracking.swanlab"}
    assert written["model.backend"] == "unsloth" and written["model.load_in_4bit"] and written["model.fast_inference"]

    trl = gpu_grpo.RunSpec("qwen3-8b-shape", "trl-vllm-deltas", 1024, prompts=1, steps=11, vllm_share=0.2,
                           recipe=gpu_grpo.SEED_RECIPE)
    other = flat(load_recipe(gpu_grpo.write_recipe(trl, "/models/q8", tmp_path / "t.yaml")))
    assert (other["model.backend"], other["model.load_in_4bit"], other["grpo.weight_sync"]) == ("trl", False, "deltas")
    assert other["model.gpu_memory_utilization"] == 0.2 and other["grpo.max_completion_length"] == 1024
    with pytest.raises(ValueError, match="recipe's batch"):
        gpu_grpo.write_recipe(gpu_grpo.RunSpec("q", "recipe", 512, recipe=gpu_grpo.SEED_RECIPE), "/m", tmp_path / "x.yaml")


def test_speed_modes_reach_the_recipe(tmp_path):
    from grpo_playground.config import load_recipe

    def grpo(mode):
        return load_recipe(gpu_grpo.write_recipe(gpu_grpo.RunSpec("m", mode, 128, 8), "/m", tmp_path / f"{mode}.yaml")).grpo

    assert (grpo("trl-vllm").logprobs, grpo("trl-vllm").weight_sync) == ("chunked", "merge")  # the product's defaults
    assert grpo("trl-vllm-full").logprobs == "full" and grpo("trl-vllm-deltas").weight_sync == "deltas"
    assert grpo("trl-vllm-lora").weight_sync == "lora"


def test_plain_vllm_rollout_asks_the_batch_both_ways_and_reports_ratios(tmp_path):
    from benchmarks import vllm_rollout

    ids = [[1, 2, 3], [4, 5]]
    trl, n = vllm_rollout.requests("trl", ids, 4)
    assert n == 1 and len(trl) == 8 and trl[4] == {"prompt_token_ids": [4, 5]}  # TRL colocate: a request per row
    plain, n = vllm_rollout.requests("plain", ids, 4)
    assert n == 4 and len(plain) == 2
    results = [{"engine": "trl", **vllm_rollout.summarize("trl", [2.0, 1.0, 1.0], [1000, 1000, 1000])},
               {"engine": "trl", **vllm_rollout.summarize("plain", [0.5, 0.5, 0.6], [1000, 1000, 1000])}]
    assert results[0]["tok_s"] == 1000 and results[1]["tok_s"] == 2000
    assert "| trl | plain | 0.500 | 1000 | 2,000 | 2.00 |" in vllm_rollout.table(results)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gpu_grpo.qwen3_tokenizer_files()))
    prompts = vllm_rollout.batch_prompts(tokenizer, 8)  # the product's GRPO prompts, in the chat template
    assert len(prompts) == 8 and len(set(map(tuple, prompts))) == 8
    assert tokenizer.decode(prompts[0]).startswith("<|im_start|>")
    args = vllm_rollout.parse_args(["--model", "m", "--tokens", "512", "--ignore-eos"])
    assert (args.prompts, args.generations, args.tokens, args.ignore_eos, args.engine) == (8, 8, 512, True, "trl")
    with pytest.raises(SystemExit):
        vllm_rollout.parse_args(["--model", "m", "--repeats", "0"])

    (tmp_path / "vllm_rollout_m.json").write_text(json.dumps({"engine_start_s": 40.0, "results": results, "prompts": 8,
                                                              "generations": 8, "tokens": 128}))
    (tmp_path / "run.json").write_text(json.dumps(_result("trl-vllm", 1.0, 9000.0) | {"label": "x", "completion": 128}))
    out = gpu_grpo.report(gpu_grpo.load_results([tmp_path]), gpu_grpo.load_rollouts([tmp_path]))
    assert list(out["runs"]) == ["x"] and out["plain_vllm_generate"]["vllm_rollout_m"]["results"][1]["tok_s"] == 2000


def test_device_run_has_every_step_the_rerun_instructions_name():
    import re

    script = (gpu_grpo.ROOT / "benchmarks" / "device_run.sh").read_text()
    assert subprocess.run(["bash", "-n", "benchmarks/device_run.sh"], cwd=gpu_grpo.ROOT).returncode == 0
    steps = set(re.findall(r"^    ([\w|-]+)\)", script, re.M))
    steps = {s for group in steps for s in group.split("|")}
    rerun = (gpu_grpo.ROOT / "BENCHMARKS.md").read_text()
    named = set(re.findall(r"device_run\.sh ((?:[\w-]+ ?)+)", rerun))
    for line in named:
        for step in line.split():
            assert step in steps, step
    assert {"grpo-speed", "grpo-speed-8b", "wait-grpo-speed", "report-speed"} <= steps


def test_device_run_gives_each_experiment_its_own_folder():
    """A name set twice at the top of the script sends the first user's results into the second's folder (issue 24's
    runs once went into the GSM8K work folder, where its progress line never found them)."""
    import collections
    import re

    script = (gpu_grpo.ROOT / "benchmarks" / "device_run.sh").read_text()
    names = collections.Counter(re.findall(r"^([A-Z][A-Z0-9_]*)=", script, re.M))
    assert not [n for n, count in names.items() if count > 1], names
    assert "--out $SPEED_DIR" in script and "--work $GSM8K_DIR" in script
