"""The Training tab's data preview (issue 39 item 10), through the real app's API: a source's first rows rendered
by the model's own chat template, the gold answer extracted as the rewards get it, and the rows skipped with why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gradio_client import Client
from test_training_tab import needs_tiny, tiny_recipe

from grpo_playground.data.preview import MAX_FIELD_CHARS

ROWS = [
    {"question": "Tom has 1,000 apples and buys 600 more. How many?", "answer": "1000 + 600 = 1600\n#### 1,600"},
    {"question": "What colour is the sky?", "answer": "It is blue.\n#### blue"},  # no number: skipped
    {"question": "Ann owes 4 and then 6 more. What is her balance?", "answer": "-4 - 6 = -10\n#### -10"},
]


def gsm8k_file(folder: Path, rows=ROWS) -> Path:
    path = folder / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def client(app_url):
    yield Client(app_url, verbose=False)


@pytest.mark.slow  # a child process imports transformers and loads the tokenizer: ~10 s on 2 cores
@needs_tiny
def test_preview_shows_rendered_prompts_gold_answers_and_skipped_rows(client, tmp_path):
    source = f"gsm8k:{gsm8k_file(tmp_path)}"
    preview = client.predict(tiny_recipe(f"data.sft_source={source}"), "sft", api_name="/preview_data")
    assert preview["stage"] == "sft" and preview["model"] == "tiny"
    assert preview["rows_seen"] == 3 and preview["skipped"] == {"non-numeric answer": 1}
    first, second = preview["rows"]
    # the gold as the rewards get it: "#### 1,600" -> 1600, the minus sign kept
    assert (first["answer"], second["answer"]) == ("1600", "-10")
    # exactly what the model reads: the template's system and user turns, the assistant header, the prefilled tag
    assert first["prompt"].startswith("<|im_start|>system\n") and "Tom has 1,000 apples" in first["prompt"]
    assert first["prompt"].endswith("<|im_start|>assistant\n<start_working_out>")
    # the SFT target continues after the prefill (no second opening tag) and closes with the template's turn end
    assert first["completion"].endswith("<SOLUTION>1600</SOLUTION><|im_end|>")
    assert not first["completion"].startswith("<start_working_out>")


@pytest.mark.slow
@needs_tiny
def test_preview_of_a_source_with_nothing_usable_says_why(client, tmp_path):
    source = f"gsm8k:{gsm8k_file(tmp_path, [ROWS[1]] * 4)}"
    preview = client.predict(tiny_recipe(f"data.grpo_source={source}"), "grpo", api_name="/preview_data")
    assert preview["rows"] == [] and preview["rows_seen"] == 4 and sum(preview["skipped"].values()) == 4


@pytest.mark.slow
@needs_tiny
def test_preview_cuts_a_long_cell(client, tmp_path):
    huge = [{"question": "x " * 3400 + "What is 1 + 1?", "answer": "#### 2"}]  # the loader's own cap is 8,000
    source = f"gsm8k:{gsm8k_file(tmp_path, huge)}"
    row = client.predict(tiny_recipe(f"data.grpo_source={source}"), "grpo", api_name="/preview_data")["rows"][0]
    assert len(row["problem"]) < MAX_FIELD_CHARS + 100 and "[cut: 6,814 characters in all]" in row["problem"]
    assert len(row["prompt"]) < MAX_FIELD_CHARS + 100


@pytest.mark.slow  # the missing file is found by the child process
def test_preview_errors_name_the_fix(client, tmp_path):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match="no such file|does not exist|not found"):
        client.predict(tiny_recipe(f"data.grpo_source=gsm8k:{tmp_path / 'missing.jsonl'}"), "grpo",
                       api_name="/preview_data")
    with pytest.raises(AppError, match="preview the data of 'sft' or 'grpo'"):
        client.predict(tiny_recipe(), "eval", api_name="/preview_data")


def test_preview_is_for_the_owner(monkeypatch):
    # a source spec names files on the server: a visitor must not read them through the preview
    from grpo_playground.config import RunConfig
    from grpo_playground.owner import OWNER_TOKEN_ENV
    from grpo_playground.jobs.data_preview import run_preview

    monkeypatch.setenv(OWNER_TOKEN_ENV, "s3cret")
    with pytest.raises(PermissionError, match="previewing data needs the owner token"):
        run_preview(RunConfig(), "grpo", "guess")
