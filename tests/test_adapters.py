"""Adapters on small fixture files in each source's real schema: numbers, tags, and every skipped row counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_playground.data import load_examples, parse_spec
from grpo_playground.data.answers import normalize_number
from grpo_playground.tags import Tags, system_prompt

FIXTURES = Path(__file__).parent / "fixtures"
GSM8K = FIXTURES / "gsm8k_sample.jsonl"


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("1,600", "1600"),  # GSM8K thousands separator
        ("-10", "-10"),  # GSM8K negative answer
        ("10.0", "10"),  # one spelling per value, so exact matches score as exact
        ("$3.50", "3.5"),  # currency sign carries no value
        ("\\boxed{42}", "42"),  # OpenMath/DAPO style
        ("-0", "0"),
        ("\\frac{1}{2}", None),  # not a plain number: kept out of numeric sets
        ("12,34", None),  # malformed separator is not silently read as 1234
        ("one half", None),
    ],
)
def test_normalize_number(raw, expected):
    assert normalize_number(raw) == expected


def test_gsm8k_answers_commas_negatives_and_skips():
    result = load_examples(f"gsm8k:{GSM8K}")
    assert [e["answer"] for e in result.examples] == ["1600", "-10", "12", "10"]
    assert result.skipped == {
        "answer without '#### N'": 1,
        "non-numeric answer": 1,
        "empty question": 1,
        "invalid JSON line": 1,
    }
    assert result.rows_seen == 8
    assert "skipped 4" in result.summary()


def test_gsm8k_example_form_and_sft_completion():
    tags = Tags("<think>", "</think>", "<answer>", "</answer>")
    example = load_examples(f"gsm8k:{GSM8K}", n=1, tags=tags, with_solution=True).examples[0]
    assert example["prompt"][0] == {"role": "system", "content": system_prompt(tags)}
    assert example["prompt"][1]["role"] == "user" and example["prompt"][1]["content"].startswith("A farm has 1,200")
    completion = example["completion"][0]["content"]
    # calculator annotations are dropped, the answer is the canonical number, the tags are the ones asked for
    assert "<<" not in completion
    assert completion.startswith("<think>It starts with 1,200 chickens")
    assert completion.endswith("</think><answer>1600</answer>")
    assert example["level"] is None and example["source"].startswith("gsm8k:")


def test_n_stops_early_and_without_solution_has_no_completion():
    result = load_examples(f"gsm8k:{GSM8K}", n=2)
    assert len(result.examples) == 2 and result.rows_seen == 2
    assert "completion" not in result.examples[0]


def test_openmath_keeps_numeric_answers_and_strips_think():
    result = load_examples(f"openmath:{FIXTURES / 'openmath_sample.jsonl'}", with_solution=True)
    assert [e["answer"] for e in result.examples] == ["14", "-3"]
    assert result.skipped == {"non-numeric expected_answer": 1, "empty generated_solution": 1}
    completion = result.examples[0]["completion"][0]["content"]
    assert "<think>" not in completion and "</think>" not in completion
    assert completion.startswith("<start_working_out>The first four even")
    assert completion.endswith("<end_working_out><SOLUTION>14</SOLUTION>")
    # for GRPO the worked solution is not needed, so the row with an empty one is kept
    assert len(load_examples(f"openmath:{FIXTURES / 'openmath_sample.jsonl'}").examples) == 3


def test_dapo_prompt_solution_and_no_sft():
    result = load_examples(f"dapo:{FIXTURES / 'dapo_sample.jsonl'}")
    assert [e["answer"] for e in result.examples] == ["21", "2"]
    assert result.skipped == {"non-numeric solution": 1}
    sft = load_examples(f"dapo:{FIXTURES / 'dapo_sample.jsonl'}", with_solution=True)
    assert sft.examples == [] and sum(sft.skipped.values()) == 3


def test_csv_column_mapping_with_levels_and_solutions():
    spec = f"file:{FIXTURES / 'custom_problems.csv'}?question=q&answer=a&solution=work&level=difficulty"
    result = load_examples(spec, with_solution=True)
    assert [(e["answer"], e["level"]) for e in result.examples] == [("3", 1), ("180", 2)]
    assert result.skipped == {"empty work": 1, "non-numeric a": 1, "non-integer difficulty": 1}


def test_parquet_and_json_readers(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    rows = [json.loads(line) for line in GSM8K.read_text().splitlines()[:3]]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "g.parquet")
    (tmp_path / "g.json").write_text(json.dumps(rows))
    for name in ("g.parquet", "g.json"):
        assert [e["answer"] for e in load_examples(f"gsm8k:{tmp_path / name}").examples] == ["1600", "-10", "12"]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("", "empty data source"),
        ("kaggle:x.csv", "must start with one of"),
        ("generator:dev", "use generator:train or generator:test"),
        ("gsm8k:data.txt", "must end in one of"),
        ("file:x.csv?question=q", "needs a column mapping"),
        ("gsm8k:x.jsonl?colour=red", "unknown option"),
        ("gsm8k:/nonexistent/test.jsonl", "does not exist"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec, message):
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        load_examples(spec)


def test_wrong_schema_names_the_columns():
    with pytest.raises(ValueError, match=r"no column\(s\) \['question', 'answer'\].*columns present"):
        load_examples(f"gsm8k:{FIXTURES / 'dapo_sample.jsonl'}")


def test_spec_round_trip():
    spec = parse_spec("file:a.csv?question=q&answer=a")
    assert str(spec) == "file:a.csv?question=q&answer=a" and spec.options == {"question": "q", "answer": "a"}


def test_hub_offline_error_names_alternatives(monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(RuntimeError, match=r"offline.*generator:train"):
        load_examples("hub:openai/gsm8k", n=2)


def test_generator_source_levels_and_solutions():
    result = load_examples("generator:test?levels=1-2", n=20, with_solution=True, seed=3)
    assert len(result.examples) == 20 and result.skipped == {}
    assert {e["level"] for e in result.examples} <= {1, 2}
    for example in result.examples:
        answer = example["answer"]  # the SFT text ends the reasoning with tiny's pretraining cue
        assert example["completion"][0]["content"].endswith(
            f"\nThe answer is {answer}.<end_working_out><SOLUTION>{answer}</SOLUTION>")
    # same seed, same problems; the other split shares none of them
    again = load_examples("generator:test?levels=1-2", n=20, seed=3)
    assert [e["problem"] for e in again.examples] == [e["problem"] for e in result.examples]
    train = {e["problem"] for e in load_examples("generator:train?levels=1-2", n=200, seed=3).examples}
    assert not train & {e["problem"] for e in result.examples}


def test_to_hf_dataset_keeps_rows_and_drops_all_null_columns():
    pytest.importorskip("datasets")
    from grpo_playground.data import to_hf_dataset

    examples = load_examples(f"gsm8k:{GSM8K}", with_solution=True).examples
    dataset = to_hf_dataset(examples)
    assert len(dataset) == 4 and "level" not in dataset.column_names
    assert dataset[0]["prompt"] == examples[0]["prompt"] and dataset[1]["answer"] == "-10"
    assert "level" in to_hf_dataset(load_examples("generator:test", n=3).examples).column_names
    with pytest.raises(ValueError, match="no examples"):
        to_hf_dataset([])


def test_data_cli_counts_sample_and_out(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "examples.jsonl"
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-m", "pipelines.data", "--source", f"gsm8k:{GSM8K}", "--sft", "--out", str(out)],
                          cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("4 examples from 8 rows; skipped 4")
    assert "[assistant] <start_working_out>It starts with 1,200 chickens" in proc.stdout
    assert json.loads(proc.stdout.strip().splitlines()[-1])["skipped"]["invalid JSON line"] == 1
    assert [json.loads(line)["answer"] for line in out.read_text().splitlines()] == ["1600", "-10", "12", "10"]
    bad = subprocess.run([sys.executable, "-m", "pipelines.data", "--source", "file:x.csv?question=q"], cwd=root,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "needs a column mapping" in bad.stderr
