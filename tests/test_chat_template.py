"""Prompts render through the tokenizer's own template (real Qwen3), with and without the reasoning prefill."""

from __future__ import annotations

import pytest

from grpo_playground.data import load_examples
from grpo_playground.data.chat_template import (
    completion_target,
    render_examples,
    render_prompt,
    template_report,
    turn_end,
)
from offline_tokenizers import qwen3_tokenizer_dir
from grpo_playground.tags import DEFAULT_TAGS, Tags

ASSISTANT = "<|im_start|>assistant\n"
EMPTY_THINK = "<think>\n\n</think>\n\n"


@pytest.fixture(scope="module")
def qwen3():
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(qwen3_tokenizer_dir())


@pytest.fixture(scope="module")
def example():
    return load_examples("generator:train", n=1, with_solution=True).examples[0]


def test_prefill_ends_prompt_with_opening_tag(qwen3, example):
    prompt = render_prompt(qwen3, example["prompt"], prefill_reasoning=True, enable_thinking=False)
    assert prompt.startswith("<|im_start|>system\nYou are given a problem.")
    assert prompt.endswith(ASSISTANT + EMPTY_THINK + "<start_working_out>")


def test_no_prefill_ends_at_assistant_header(qwen3, example):
    off = render_prompt(qwen3, example["prompt"], prefill_reasoning=False, enable_thinking=False)
    assert off.endswith(ASSISTANT + EMPTY_THINK)
    thinking = render_prompt(qwen3, example["prompt"], prefill_reasoning=False, enable_thinking=True)
    assert thinking.endswith(ASSISTANT)  # Qwen3 left free to open its own <think>


def test_sft_rows_do_not_repeat_the_prefilled_tag(qwen3, example):
    row = render_examples([example], qwen3, prefill_reasoning=True)[0]
    assert row["prompt"].endswith("<start_working_out>")
    assert not row["completion"].startswith("<start_working_out>")
    assert row["completion"].endswith(f"<SOLUTION>{example['answer']}</SOLUTION><|im_end|>")  # learns to stop
    assert row["answer"] == example["answer"] and row["level"] == example["level"]
    # prompt + completion is the full tagged solution right after the assistant header: nothing lost or doubled
    full = row["prompt"] + row["completion"]
    assert full.count("<start_working_out>") == 2  # once in the system prompt's instructions, once as prefill
    assert example["completion"][0]["content"] + "<|im_end|>" in full

    without = render_examples([example], qwen3, prefill_reasoning=False)[0]
    assert without["completion"].startswith("<start_working_out>")


def test_grpo_rows_have_only_prompts(qwen3):
    examples = load_examples("generator:test", n=3).examples
    rows = render_examples(examples, qwen3)
    assert all(isinstance(r["prompt"], str) and "completion" not in r for r in rows)


def test_report_shows_what_conversational_training_would_insert(qwen3, example):
    on = template_report(qwen3, example, prefill_reasoning=True, enable_thinking=True)
    assert on.supports_thinking and on.conversation_inserts == EMPTY_THINK
    assert any("inserts" in note for note in on.notes)
    assert on.assistant_prefix == "<|im_end|>\n" + ASSISTANT + "<start_working_out>"
    off = template_report(qwen3, example, prefill_reasoning=False, enable_thinking=False)
    assert off.conversation_inserts == "" and off.turn_end == "<|im_end|>"
    assert any("must write" in note for note in off.notes)


def test_custom_tags_and_target_checks(qwen3, example):
    tags = Tags("<reasoning>", "</reasoning>", "<answer>", "</answer>")
    prompt = render_prompt(qwen3, example["prompt"], tags)
    assert prompt.endswith("<reasoning>")
    assert completion_target("<reasoning>x</reasoning><answer>1</answer>", tags) == "x</reasoning><answer>1</answer>"
    with pytest.raises(ValueError, match="does not start with"):
        completion_target("x<answer>1</answer>", DEFAULT_TAGS)
    assert turn_end(qwen3) == "<|im_end|>"


def test_tokenizer_without_template_is_a_clear_error(qwen3, example):
    class Bare:
        chat_template = None
        name_or_path = "gpt2-like"

    with pytest.raises(ValueError, match="has no chat_template"):
        render_prompt(Bare(), example["prompt"])


@pytest.mark.slow  # the data CLI loads a model in a child
def test_data_cli_reports_the_models_prompt():
    import subprocess
    import sys
    from pathlib import Path

    from grpo_playground.models import resolve_model

    if not (Path(resolve_model("tiny").location) / "config.json").is_file():
        pytest.skip("assets/tiny is not built yet (python -m pipelines.build_tiny)")
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-m", "pipelines.data", "--source", "generator:test", "--n", "1", "--model", "tiny"],
                          cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "<SOLUTION>                1  '<SOLUTION>'  -> one token" in proc.stdout  # tiny knows the tags
    assert "<|im_start|>assistant\n<start_working_out>\nassistant prefix" in proc.stdout


def test_run_template_supplies_the_system_prompt_only_when_a_conversation_has_none(qwen3):
    from grpo_playground.data.chat_template import run_template
    from grpo_playground.tags import system_prompt

    served = run_template(qwen3.chat_template, DEFAULT_TAGS, prefill_reasoning=True)
    user = [{"role": "user", "content": "What is 2 + 3?"}]

    def render(messages, template=served):
        return qwen3.apply_chat_template(messages, chat_template=template, tokenize=False, add_generation_prompt=True,
                                         enable_thinking=False)

    # a bare client's conversation renders exactly as training rendered it with the recipe's system prompt
    trained = render_prompt(qwen3, [{"role": "system", "content": system_prompt()}] + user)
    assert render(user) == trained
    own = render([{"role": "system", "content": "Be brief."}] + user)
    assert own.startswith("<|im_start|>system\nBe brief.<|im_end|>") and "You are given a problem" not in own
    assert own.endswith(ASSISTANT + EMPTY_THINK + "<start_working_out>")
    # applied twice, nothing is doubled; without prefill the template stops at the assistant header
    assert render(user, run_template(served)) == trained
    assert render(user, run_template(qwen3.chat_template, prefill_reasoning=False)).endswith(ASSISTANT + EMPTY_THINK)
