"""benchmarks.vllm_chat_proof's CPU side: the adapters it makes (a plain LoRA, and one with the format tags
registered as new tokens, as data.register_tags does) and what the product does with them; on a machine without
a GPU the proof stops with vLLM's reason and still writes its JSON and the server log beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import vllm_chat_proof
from grpo_playground.serving.backends import nvidia_gpu_present, vllm_adapter_problem, vllm_command


@pytest.fixture(scope="module")
def qwen_base(tmp_path_factory) -> Path:
    """A small random Qwen3 with the real Qwen3 tokenizer, which splits the format tags into several tokens."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from offline_tokenizers import qwen3_tokenizer_dir

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(qwen3_tokenizer_dir())
    config = AutoConfig.for_model("qwen3", vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                  tie_word_embeddings=True)
    folder = tmp_path_factory.mktemp("qwen-base")
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.slow  # the proof's children
@pytest.mark.skipif(nvidia_gpu_present(), reason="this machine has a GPU: the proof would really run")
def test_the_proof_makes_its_adapters_and_reports_why_vllm_cannot_run_here(qwen_base, tmp_path):
    out = tmp_path / "gpu" / "vllm_chat.json"
    code = vllm_chat_proof.main(["--base", str(qwen_base), "--work", str(tmp_path / "adapters"), "--out", str(out)])
    report = json.loads(out.read_text())
    assert code == 1 and "vLLM backend cannot run here" in report["error"]
    assert Path(report["server_log"]) == out.with_suffix(".server.log") and out.with_suffix(".server.log").is_file()
    adapters = {"plain": Path(report["adapters"]["served"]), "hot": Path(report["adapters"]["hot"][0]),
                "tagged": Path(report["adapters"]["tagged"])}
    assert report["adapters"]["served"].endswith("plain")  # no --lora: the made adapter is served
    plain = json.loads((adapters["plain"] / "adapter_config.json").read_text())
    tagged = json.loads((adapters["tagged"] / "adapter_config.json").read_text())
    assert not plain.get("trainable_token_indices")
    assert tagged["trainable_token_indices"], "the tag-registered adapter must carry its new embedding rows"
    assert vllm_adapter_problem(adapters["plain"]) is None and vllm_adapter_problem(adapters["hot"]) is None
    assert "data.register_tags: false" in vllm_adapter_problem(adapters["tagged"])
    with pytest.raises(ValueError, match="export the merged model"):
        vllm_command(str(qwen_base), {"plain": adapters["plain"], "tagged": adapters["tagged"]}, 8000)


def test_the_proof_summary_compares_with_the_issues_targets():
    report = {"throughput": [
        {"model": "adapter0", "concurrent": 1, "first_token_s_median": 0.05, "per_chat_tokens_per_s_median": 320.0,
         "steady_tokens_per_s": 330.0, "tokens_per_s": 300.0},
        {"model": "adapter0", "concurrent": 8, "first_token_s_median": 0.09, "steady_tokens_per_s": 2100.0,
         "tokens_per_s": 1500.0}],
        "starts": [{"kind": "fresh", "send_to_first_token_s": 95.0}, {"kind": "restarted", "send_to_first_token_s": 61.0}]}
    summary = vllm_chat_proof.summarize(report)
    assert summary["model"] == "adapter0" and summary["tokens_per_s_8_chats_steady"] == 2100.0
    assert summary["meets_first_token"] is True and summary["meets_tokens_per_s_1_chat"] is True
    assert summary["meets_tokens_per_s_8_chats"] is False  # 2,100 in steady state against 2,500
    assert summary["meets_fresh_start"] is True and summary["meets_restart"] is False  # 61 s against 60
    assert vllm_chat_proof.summarize({}) == {}
    # a run that only got as far as the fresh start still reports it
    assert vllm_chat_proof.summarize({"starts": report["starts"][:1]})["meets_fresh_start"] is True


def test_steady_state_counts_only_the_time_every_chat_streams():
    # two chats of 100 tokens in 10 equal pieces, one a second; the second starts 5 s after the first
    a = {"tokens": 100, "_pieces": [(float(t), 10) for t in range(1, 11)]}  # 1 .. 10 s
    b = {"tokens": 100, "_pieces": [(float(t), 10) for t in range(6, 16)]}  # 6 .. 15 s
    steady = vllm_chat_proof.steady_rate([a, b])
    # window 6 .. 10 s: the pieces at 7-10 s of each (4 x 10 tokens each) over 4 s
    assert steady == {"window_s": 4.0, "tokens": 80.0, "tokens_per_s": 20.0}
    late = {"tokens": 10, "_pieces": [(12.0, 10)]}  # never streamed while the other did
    assert vllm_chat_proof.steady_rate([a, late]) is None
    assert vllm_chat_proof.steady_rate([a, {"error": "connection refused"}]) is None


def test_the_start_is_split_from_vllms_own_log():
    """On the log of the H200 run (vLLM 0.22, default mode, before this proof changed the server's shape)."""
    log = (Path(__file__).resolve().parents[1] / "results/gpu/h200_chat/vllm_chat.server.log").read_text()
    ready_at = log.index("Application startup complete")
    timings = vllm_chat_proof.log_timings(log, ready_at)
    assert timings["compile_s"] == 33.73 and timings["graph_capture_s"] == 28 and timings["init_engine_s"] == 79.39
    assert timings["weights_s"] == 0.39 and timings["compile_cache_hit"] is False
    # no warm-up then: every JIT compile fell on the first requests
    assert timings["jit_during_warm_up"] == [] and "_topk_topp_kernel" in timings["jit_after_ready"]


@pytest.mark.slow  # a llama.cpp chat server
def test_the_proofs_chat_measurements_on_a_real_streaming_server():
    """The proof's client side (streamed chats through serving.client, first-token latency, tokens/s, chats at
    once from threads) against a real OpenAI-compatible server: llama.cpp on the packaged SmolLM2 GGUF."""
    from grpo_playground.models import MODELS, gguf_path, load_tokenizer
    from grpo_playground.serving import llamacpp_server

    tokenizer = load_tokenizer("tiny")  # counts the reply's tokens; any tokenizer exercises the plumbing
    server = llamacpp_server(str(gguf_path(MODELS["smollm2-135m"]))).start()
    try:
        model = json.loads(__import__("httpx").get(server.base_url + "/v1/models").text)["data"][0]["id"]
        one = vllm_chat_proof.chat_once(server.base_url, model, vllm_chat_proof.PROBLEM, tokenizer, 12, temperature=0.0)
        both = vllm_chat_proof.chats(server.base_url, model, tokenizer, 2, 8, rounds=2)
    finally:
        server.stop()
    assert one["reply"].strip() and one["tokens"] > 0 and 0 < one["first_token_s"] <= one["seconds"]
    assert len(one["_pieces"]) == one["pieces"] and "_pieces" not in vllm_chat_proof.public(one)
    assert both["ok"] == 4 and both["failed"] == 0 and both["tokens"] > 0 and both["tokens_per_s"] > 0
    assert 0 < both["first_token_s_median"] <= both["first_token_s_max"] <= both["wall_s"]
    # llama.cpp answers one request at a time, so two chats never stream together: no steady state to report
    assert len(both["steady_rounds"]) == 2 and (both["steady_tokens_per_s"] is None or both["steady_tokens_per_s"] > 0)


def test_every_servers_whole_log_is_kept_a_failed_one_too(tmp_path):
    fresh, failed = tmp_path / "fresh.log", tmp_path / "failed.log"
    fresh.write_text("INFO torch.compile took 12.50 s in total\nTriton kernel JIT compilation during inference: _a\n"
                     "ready\nTriton kernel JIT compilation during inference: _b\n")
    failed.write_text("ValueError: Free memory on device is less than desired GPU memory utilization\n")
    starts = [{"kind": "fresh", "log": str(fresh), "_ready_at": fresh.read_text().index("ready")}]
    servers = [{"log": str(fresh)}, {"log": str(failed)}]  # the restart's server never became healthy
    out = tmp_path / "vllm_chat.server.log"
    vllm_chat_proof.keep_logs(starts, servers, out)
    kept = out.read_text()
    assert kept.index("===== fresh start") < kept.index("===== failed start") and "Free memory on device" in kept
    assert kept.count("torch.compile took") == 1
    assert starts[0]["log_timings"]["compile_s"] == 12.5 and "_ready_at" not in starts[0]
    assert starts[0]["log_timings"]["jit_during_warm_up"] == ["_a"] and starts[0]["log_timings"]["jit_after_ready"] == ["_b"]
