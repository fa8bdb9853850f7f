"""One GPU shared by a training job and the chat servers (grpo_playground.gpu_share): the sizing fed with the
free/total memory an H200 reports in each situation, the records each side leaves for the other, and the pool
refusing a chat server that does not fit, naming the job to stop."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from grpo_playground import gpu_share
from grpo_playground.gpu_share import GIB, GpuBusy, GpuMemory, chat_server_share, check_training_fits

H200 = 143 * GIB  # total memory torch.cuda.mem_get_info reports there (143,771 MiB)
SMOLLM2_CHAT = 7 * GIB  # backends.chat_need_bytes for SmolLM2-135M: ~0.3 GB weights, KV for 16 x 2048, 5 GiB fixed


def test_an_idle_gpu_gives_a_chat_server_what_it_needs_not_a_fixed_share():
    share = chat_server_share(SMOLLM2_CHAT, "smollm2", GpuMemory(free=142 * GIB, total=H200), [], [])
    assert share == 0.05  # 7 of 143 GiB, rounded up to a whole percent; the old fixed 0.7 took 100 GiB


def test_a_chat_server_beside_a_job_leaves_what_the_job_still_needs():
    # the job declared a 60 GiB peak and holds 20 so far (SFT done, its vLLM engine not started yet)
    job = [{"pid": 11, "what": "the GRPO job of run r1", "bytes": 60 * GIB}]
    gpu = GpuMemory(free=H200 - 20 * GIB, total=H200)
    assert gpu_share.pending_job_bytes(gpu, job, []) == 40 * GIB
    assert chat_server_share(SMOLLM2_CHAT, "smollm2", gpu, job, []) == 0.05
    # room: 123 free - 40 still to come - 2 margin = 81 GiB, so a 90 GiB chat server does not fit
    with pytest.raises(GpuBusy) as refused:
        chat_server_share(90 * GIB, "qwen3-8b", gpu, job, [])
    message = str(refused.value)
    assert "the training job the GRPO job of run r1 (pid 11, 60.0 GiB)" in message
    assert "still needs 40.0 GiB" in message and "stop it in the Training tab" in message


def test_memory_held_by_chat_servers_is_not_counted_as_the_jobs():
    chats = [{"pid": 21, "what": "vLLM chat server of smollm2", "bytes": 7 * GIB}]
    job = [{"pid": 11, "what": "run r1", "bytes": 60 * GIB}]
    gpu = GpuMemory(free=H200 - 7 * GIB - 60 * GIB, total=H200)  # the job is at its peak
    assert gpu_share.pending_job_bytes(gpu, job, chats) == 0
    share = chat_server_share(70 * GIB, "qwen3-8b", gpu, job, chats)
    assert share * H200 <= gpu.free - gpu_share.MARGIN_BYTES  # rounded down when rounding up would not fit
    with pytest.raises(GpuBusy, match=r"stop them with 'Restart backends'"):
        chat_server_share(80 * GIB, "qwen3-8b", gpu, job, chats)


def test_a_job_that_does_not_fit_beside_the_chat_servers_is_refused_naming_them():
    chats = [{"pid": 21, "what": "vLLM chat server of qwen3-8b", "bytes": 100 * GIB}]
    gpu = GpuMemory(free=40 * GIB, total=H200)
    check_training_fits(30 * GIB, "the GRPO job of run r1", gpu, chats)  # fits: nothing raised
    with pytest.raises(GpuBusy) as refused:
        check_training_fits(60 * GIB, "the GRPO job of run r1", gpu, chats)
    message = str(refused.value)
    assert "needs about 60.0 GiB more GPU memory and 40.0 GiB is free" in message
    assert "vLLM chat server of qwen3-8b (pid 21, 100.0 GiB)" in message and "'Restart backends'" in message
    # without chat servers the rough estimate refuses nothing (the doctor diagnoses a real OOM)
    check_training_fits(60 * GIB, "the GRPO job of run r1", gpu, [])


def test_a_grpo_jobs_need_counts_its_engine_logits_and_weights():
    from grpo_playground.vllm_memory import shape_from_config, weight_bytes

    qwen3_8b = {"hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
                "head_dim": 128, "vocab_size": 151936, "intermediate_size": 12288, "tie_word_embeddings": False}
    shape = shape_from_config(qwen3_8b)
    loaded = gpu_share.training_need_bytes(20 * GIB, shape, 151936, 8, 1280, weights_loaded=True)
    assert loaded == 20 * GIB + 8 * 1280 * 151936 * 4  # engine + float32 logits of one batch (5.8 GiB)
    assert gpu_share.training_need_bytes(20 * GIB, shape, 151936, 8, 1280, weights_loaded=False) == loaded + int(
        weight_bytes(shape))  # ~16 GB of bf16 weights still to load (Unsloth sizes before loading)


def test_each_side_records_what_it_holds_and_records_of_ended_processes_vanish(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_PLAYGROUND_CACHE", str(tmp_path))
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    gpu_share.record(gpu_share.CHAT, os.getpid(), "vLLM chat server of smollm2", 7 * GIB)
    gpu_share.record(gpu_share.CHAT, ended.pid, "a server that crashed", 9 * GIB)
    assert gpu_share.holders(gpu_share.CHAT) == [{"pid": os.getpid(), "what": "vLLM chat server of smollm2",
                                                  "bytes": 7 * GIB}]
    assert not (tmp_path / "gpu_share" / f"chat-{ended.pid}.json").exists()
    assert gpu_share.holders(gpu_share.JOB) == []
    gpu_share.forget(gpu_share.CHAT, os.getpid())
    assert gpu_share.holders(gpu_share.CHAT) == []


def test_the_pool_refuses_a_vllm_chat_server_beside_a_job_that_needs_the_memory(tmp_path, monkeypatch):
    """The Chat tab's path: the pool sizes a vLLM server from nvidia-smi's numbers and the job's record, and
    refuses before building anything (vllm_server is never reached)."""
    from grpo_playground.serving import VLLM, ChatTarget, ServerPool, pool

    monkeypatch.setenv("GRPO_PLAYGROUND_CACHE", str(tmp_path))
    gpu_share.record(gpu_share.JOB, os.getpid(), "the GRPO job of run r1", 140 * GIB)
    monkeypatch.setattr(gpu_share, "query_nvidia_smi", lambda: GpuMemory(free=H200 - 30 * GIB, total=H200))
    built = []
    monkeypatch.setattr(pool, "vllm_server", lambda *a, **k: built.append(k))
    target = ChatTarget(VLLM, "assets/tiny", None, "tiny")
    chat_pool = ServerPool()
    with pytest.raises(GpuBusy, match="still needs 110.0 GiB"):
        chat_pool.server_for(target)
    assert built == [] and chat_pool.describe() == []
    gpu_share.forget(gpu_share.JOB, os.getpid())
    assert chat_pool._vllm_share(target) == 0.04  # the tiny model's chat need, ~5 GiB of 143, once the job ended


def test_the_training_job_checks_and_records_its_need_before_its_vllm_engine_starts(tmp_path, monkeypatch):
    """training.backend.vllm_memory_share's path on the GPU (torch.cuda.mem_get_info fed with an H200's numbers)."""
    from grpo_playground.config import load_recipe
    from grpo_playground.training.backend import vllm_memory_share
    from grpo_playground.vllm_memory import read_config

    monkeypatch.setenv("GRPO_PLAYGROUND_CACHE", str(tmp_path))
    monkeypatch.setattr(gpu_share, "query_torch", lambda: GpuMemory(free=H200 - 8 * GIB, total=H200))
    cfg = load_recipe("recipes/tiny-cpu.yaml")
    share = vllm_memory_share(cfg, read_config("assets/tiny"))
    assert 0.05 <= share < 0.2
    (job,) = gpu_share.holders(gpu_share.JOB)
    assert job["pid"] == os.getpid() and job["bytes"] >= 8 * GIB + share * H200 and cfg.name in job["what"]
    gpu_share.forget(gpu_share.JOB, os.getpid())
    # a chat server holds most of the card: the job is refused before its engine starts, naming the server
    gpu_share.record(gpu_share.CHAT, os.getpid(), "vLLM chat server of qwen3-8b", 130 * GIB)
    monkeypatch.setattr(gpu_share, "query_torch", lambda: GpuMemory(free=5 * GIB, total=H200))
    with pytest.raises(GpuBusy, match=r"vLLM chat server of qwen3-8b \(pid \d+, 130.0 GiB\)"):
        vllm_memory_share(cfg, read_config("assets/tiny"))
    assert gpu_share.holders(gpu_share.JOB) == []


@pytest.mark.skipif(__import__("grpo_playground.serving.backends", fromlist=["x"]).nvidia_gpu_present(),
                    reason="this machine has a GPU: the proof would really run")
def test_the_gpu_sharing_proof_records_why_it_cannot_run_here(tmp_path):
    import json

    from benchmarks import gpu_share_proof

    out = tmp_path / "gpu_share.json"
    code = gpu_share_proof.main(["chat-then-job", "--out", str(out), "--work", str(tmp_path / "work"),
                                 "--cache", str(tmp_path / "cache")])
    report = json.loads(out.read_text())
    assert code == 1 and "vLLM backend cannot run here" in report["error"]
    assert report["scenario"] == "chat-then-job" and "smi_before" in report and out.with_suffix(".logs").is_dir()
