"""Where a step's time goes (StepTimer, RunCallback's timing rows), vLLM's memory share, and the vLLM/tags decision."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from grpo_playground.step_timing import PHASES, STEP_KEY, StepTimer, phase_key


def test_nested_phases_are_exclusive_and_add_up_to_the_step():
    timer = StepTimer()

    class Trainer:
        def training_step(self):  # 20 ms of its own around a 30 ms rollout
            time.sleep(0.01)
            self.rollout()
            time.sleep(0.01)

        def rollout(self):
            time.sleep(0.03)

    trainer = Trainer()
    assert timer.wrap(trainer, "training_step", "forward_backward") and timer.wrap(trainer, "rollout", "rollout")
    assert not timer.wrap(trainer, "no_such_method", "rewards")  # another backend's trainer: nothing to time
    timer.begin_step()
    trainer.training_step()
    time.sleep(0.01)  # outside every phase: "other"
    row = timer.end_step()
    assert row[phase_key("rollout")] == pytest.approx(0.03, abs=0.015)
    assert row[phase_key("forward_backward")] == pytest.approx(0.02, abs=0.015)
    assert row[phase_key("other")] == pytest.approx(0.01, abs=0.015)
    assert sum(row[phase_key(p)] for p in PHASES) == pytest.approx(row[STEP_KEY], abs=1e-5)
    assert timer.end_step() == {}  # no step begun: nothing to report


def test_callback_time_is_shown_with_the_next_step():
    timer = StepTimer()
    timer.begin_step()
    timer.end_step()
    timer.add_callbacks(0.5)
    timer.begin_step()
    row = timer.end_step()
    assert row[phase_key("callbacks")] == 0.5 and row[STEP_KEY] >= 0.5


def _callback(tmp_path):
    from grpo_playground.training.callbacks import RunCallback
    from grpo_playground.training.run_folder import RunFolder

    tracker = SimpleNamespace(log_metrics=lambda row: None, log_sample=lambda s: None)
    return RunCallback(RunFolder(tmp_path), "grpo", tracker, [], None)


def _step(callback, step, should_log, logs=None):
    state = SimpleNamespace(global_step=step, max_steps=4)
    args = SimpleNamespace(world_size=1)
    control = SimpleNamespace(should_log=should_log, should_save=False, should_training_stop=False)
    callback.on_step_begin(args, state, control)
    callback.on_pre_optimizer_step(args, state, control)
    time.sleep(0.005)
    callback.on_optimizer_step(args, state, control)
    callback.on_step_end(args, state, control)
    if should_log:
        callback.on_log(args, state, control, logs=logs)


def test_every_step_gets_one_metrics_row_with_its_timing(tmp_path):
    """Logging steps carry TRL's keys and the timing in one row; the steps between get a timing row of their own."""
    callback = _callback(tmp_path)
    _step(callback, 1, True, {"loss": 0.5, "reward": 1.0})
    _step(callback, 2, False)
    _step(callback, 3, True, {"loss": 0.4, "reward": 2.0})
    _step(callback, 4, True)  # the Trainer set should_log, but no log came (the last step): flushed at train end
    callback.on_train_end(None, None, None)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert rows[0]["reward"] == 1.0 and rows[2]["loss"] == 0.4 and "reward" not in rows[1]
    for row in rows:
        assert row[phase_key("optimizer")] >= 0.004
        assert sum(row[phase_key(p)] for p in PHASES) == pytest.approx(row[STEP_KEY], abs=1e-5)
    assert rows[1][phase_key("callbacks")] > 0  # step 1's file writes, shown with step 2


def test_vllm_memory_share_grows_with_the_model_and_the_batch():
    from grpo_playground.vllm_memory import memory_share, shape_from_config

    smollm2 = dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                   intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True)
    qwen3_8b = dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                    intermediate_size=12288, vocab_size=151936, tie_word_embeddings=False)
    small, big = shape_from_config(smollm2), shape_from_config(qwen3_8b)
    assert small["linear_params"] + small["embedding_params"] == pytest.approx(134.5e6, rel=0.01)  # SmolLM2-135M
    assert big["linear_params"] + big["embedding_params"] == pytest.approx(8.19e9, rel=0.01)  # Qwen3-8B
    assert small["kv_bytes_per_token"] == 2 * 30 * 3 * 64 * 2
    h200 = 143771 * 2**20
    tiny_share = memory_share(small, 64, 1152, h200)
    assert tiny_share <= 0.07  # ~9 GiB of a 140 GiB card, not the seed's fixed 0.7
    assert memory_share(big, 8, 1536, h200) > memory_share(big, 8, 1536, h200, four_bit=True) > tiny_share
    assert memory_share(big, 64, 8192, 24 * 2**30) == 0.9  # never the whole card
    assert memory_share(small, 1, 64, h200) == 0.05


def test_vllm_runs_keep_the_tags_as_text(monkeypatch):
    from grpo_playground.config import RunConfig
    from grpo_playground.training import backend

    cfg = RunConfig()
    monkeypatch.setattr(backend, "cuda_available", lambda: True)
    monkeypatch.setattr(backend.importlib.util, "find_spec", lambda name: object())  # vllm and unsloth "installed"
    assert backend.vllm_rollouts(cfg)
    extra, note = backend.register_tags(None, None, cfg)
    assert extra == {} and note == backend.VLLM_TAGS_NOTE
    cfg.grpo.enabled = False  # an SFT-only run (the comparison's sft-W) whose GRPO comes later, from its adapter
    assert backend.register_tags(None, None, cfg) == ({}, backend.VLLM_TAGS_NOTE)
    cfg.grpo.enabled = True
    cfg.model.backend, cfg.model.fast_inference = "unsloth", False
    assert not backend.vllm_rollouts(cfg)  # Unsloth's vLLM is its fast_inference
    cfg.model.backend, cfg.grpo.use_vllm = "trl", False
    assert not backend.vllm_rollouts(cfg)
    monkeypatch.setattr(backend, "cuda_available", lambda: False)
    cfg.grpo.use_vllm = True
    assert not backend.vllm_rollouts(cfg)  # CPU: HF generate, tags registered as the recipe says


def test_an_adapter_that_registered_tags_is_recognised(tmp_path):
    from grpo_playground.training.backend import adapter_registered_tags

    assert not adapter_registered_tags(None) and not adapter_registered_tags(tmp_path)
    (tmp_path / "adapter_config.json").write_text(json.dumps({"trainable_token_indices": None}))
    assert not adapter_registered_tags(tmp_path)
    (tmp_path / "adapter_config.json").write_text(json.dumps({"trainable_token_indices": {"embed_tokens": [49152]}}))
    assert adapter_registered_tags(tmp_path)


def test_the_vllm_eval_backend_sizes_its_share_from_the_model(monkeypatch, tmp_path):
    import torch

    from grpo_playground.eval.engine_backends import eval_memory_share

    (tmp_path / "config.json").write_text(json.dumps(dict(
        hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, intermediate_size=1536,
        vocab_size=49152, tie_word_embeddings=True)))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=143771 * 2**20))
    assert 0.05 <= eval_memory_share(tmp_path) <= 0.1  # SmolLM2 on an H200: ~11 GiB, not the 98 GiB of a fixed 0.7


def test_a_stop_asked_at_the_last_step_lets_the_stage_finish(tmp_path):
    """A stop seen at step max_steps used to save a 'stopped' checkpoint there; its resume then ran a step past
    max_steps (CI: status step 5 of 4). Before the last step the stop still saves and stops."""
    from types import SimpleNamespace

    from transformers import TrainerControl

    from grpo_playground.training.callbacks import RunCallback
    from grpo_playground.training.run_folder import RunFolder

    folder = RunFolder(tmp_path)
    (tmp_path / "stop.request").touch()
    args = SimpleNamespace(world_size=1)
    for step, stops in ((3, True), (4, False)):
        callback = RunCallback(folder, "grpo", None, [], None)
        control = callback.on_step_end(args, SimpleNamespace(global_step=step, max_steps=4), TrainerControl())
        assert (control.should_training_stop, callback.stopped_by) == (stops, "stop" if stops else ""), step
