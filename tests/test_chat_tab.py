"""The Chat tab through the app's own API (gradio_client, streaming), against a real llama.cpp server on the
packaged SmolLM2 GGUF; plus the pure helpers: folding, SOLUTION extraction and reward scoring."""

from __future__ import annotations

import pytest

from grpo_playground.models import MODELS, gguf_path
from grpo_playground.rewards import score_group
from grpo_playground.serving import LLAMA_CPP, POOL, ChatTarget
from grpo_playground.ui.chat_tab import MAX_INPUT_CHARS, for_display, score_table

SMOLLM2_KEY = ChatTarget(LLAMA_CPP, str(gguf_path(MODELS["smollm2-135m"]))).key
FORMATTED = "12 + 7 = 19<end_working_out><SOLUTION>19</SOLUTION>"


@pytest.fixture(scope="module")
def client(app_url):
    from gradio_client import Client

    yield Client(app_url, verbose=False)
    POOL.stop_all()


def text_of(message: dict) -> str:
    """Gradio 6 sends message content as a list of parts."""
    content = message["content"]
    return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)


def ask(client, question, model_1=SMOLLM2_KEY, model_2=None, gold="5", max_tokens=16):
    job = client.submit(question, gold, model_1, model_2, None, 0.0, 0.95, max_tokens,
                        "Answer briefly.", ["check_answer", "check_numbers"], api_name="/chat")
    updates = list(job)
    return updates, job.result()  # raises the app's error, if any


def test_chat_api_streams_a_real_reply_and_scores_it(client):
    updates, final = ask(client, "What is 2 + 3?")
    assert len(updates) >= 3, "the reply should stream in several updates"
    bot_1, bot_2, _, scores, notes = final[:5]
    assert bot_1[0]["role"] == "user" and text_of(bot_1[0]) == "What is 2 + 3?"
    reply = text_of(bot_1[-1])
    assert bot_1[-1]["role"] == "assistant" and reply.strip()
    assert bot_2 == [] and notes == ""
    assert "SOLUTION content" in scores and "check_answer" in scores and "check_numbers" in scores
    # the stream is monotonic: each update extends the one before
    texts = [text_of(u[0][-1]) for u in updates if u[0] and u[0][-1]["role"] == "assistant"]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))


def test_vllm_side_by_side_says_why_it_cannot_run_here(client):
    from grpo_playground.serving import discover_targets

    vllm_key = next(t.key for t in discover_targets() if t.backend == "vllm")
    _, final = ask(client, "What is 1 + 1?", model_2=vllm_key, max_tokens=4)
    bot_1, bot_2, _, _, notes = final[:5]
    assert text_of(bot_1[-1]).strip()
    assert text_of(bot_2[-1]).startswith("[no reply: vLLM backend cannot run here")
    assert "no NVIDIA GPU" in notes


def test_bad_requests_are_refused_with_a_reason(client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match=f"keep it under {MAX_INPUT_CHARS}"):
        ask(client, "x" * (MAX_INPUT_CHARS + 1))
    with pytest.raises(AppError, match="Unknown checkpoint"):
        ask(client, "hi", model_1="llama.cpp|/etc/passwd|")
    with pytest.raises(AppError, match="Pick at least one checkpoint"):
        ask(client, "hi", model_1=None)


def test_prefilled_opening_tag_is_restored_for_the_fold():
    assert for_display(FORMATTED) == "<start_working_out>" + FORMATTED
    assert for_display("<start_working_out>" + FORMATTED) == "<start_working_out>" + FORMATTED
    assert for_display("plain answer 19") == "plain answer 19"


def test_score_table_extracts_the_solution_and_uses_the_reward_functions():
    table = score_table(["sft", "base"], [FORMATTED, "the answer is 19"], "19", ["check_answer", "check_numbers"])
    rows = table.splitlines()
    expected = score_group([FORMATTED], "19", {"check_answer": 1.0, "check_numbers": 1.0}, scale="none").completions[0]
    assert rows[2].startswith("| sft | 19 |") and f"**{expected.total:g}**" in rows[2]
    assert "| base | (none) |" in rows[3]
    assert "Give the gold answer" in score_table(["sft"], [FORMATTED], "", ["check_answer"])


def test_the_working_out_is_folded_and_the_solution_stays_visible():
    import gradio as gr

    from grpo_playground.ui.chat_tab import create_chat_tab

    with gr.Blocks():
        chatbot = create_chat_tab()["chatbots"][0]
    # a reply from a template that prefilled <start_working_out>: the model's text starts inside the working-out
    shown = chatbot.postprocess([{"role": "assistant", "content": for_display(FORMATTED)}]).root
    assert shown[0].metadata["title"] == "Reasoning" and shown[0].content[0].text == "12 + 7 = 19"
    assert shown[1].metadata is None and shown[1].content[0].text == "<SOLUTION>19</SOLUTION>"


def test_each_browser_session_keeps_its_own_conversation(app_url, client):
    from gradio_client import Client

    ask(client, "What is 2 + 3?", max_tokens=4)
    _, final = ask(client, "And 3 + 4?", max_tokens=4)
    assert [text_of(m) for m in final[0] if m["role"] == "user"][-2:] == ["What is 2 + 3?", "And 3 + 4?"]
    other = Client(app_url, verbose=False)
    _, fresh = ask(other, "What is 1 + 1?", max_tokens=4)
    assert [text_of(m) for m in fresh[0] if m["role"] == "user"] == ["What is 1 + 1?"]


@pytest.mark.slow
def test_two_checkpoints_side_by_side_through_llamacpp(client, tmp_path, monkeypatch):
    from grpo_playground.export import export_run
    from grpo_playground.serving import discover_targets

    monkeypatch.setenv("GRPO_PLAYGROUND_EXPORTS_DIR", str(tmp_path / "exports"))
    export_run(model="tiny", gguf=["q8_0"], verify=False, say=lambda _: None)
    tiny_key = next(t.key for t in discover_targets() if t.label.endswith("tiny.q8_0.gguf"))
    _, final = ask(client, "Tom has 12 apples and buys 7 more. How many apples?", model_2=tiny_key, max_tokens=24)
    bot_1, bot_2, _, scores, notes = final[:5]
    assert text_of(bot_1[-1]).strip() and text_of(bot_2[-1]).strip() and notes == ""
    assert "smollm2-135m" in scores and "tiny.q8_0.gguf" in scores
