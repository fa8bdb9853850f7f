"""The Reward sandbox through the real app: the `score` API via gradio_client, and the tab's helpers."""

from __future__ import annotations

import json
import re

import pytest

from grpo_playground.rewards import MAX_COMPLETIONS, RewardInputError, score_group
from grpo_playground.ui.sandbox_input import join_group, read_completions_file, split_group
from grpo_playground.ui.sandbox_render import highlight, render_details
from grpo_playground.ui.sandbox_tab import EXAMPLE_GROUP

W = "<start_working_out>6 x 7 = 42<end_working_out>"
GROUP_TEXT = f"{W}<SOLUTION>42</SOLUTION>\n---\n{W}<SOLUTION>41</SOLUTION>\n---\n{W}<SOLUTION>42"


@pytest.fixture(scope="module")
def client(app_url):
    from gradio_client import Client

    return Client(app_url, verbose=False)


def test_score_endpoint_returns_one_row_per_completion_with_seed_defaults(client):
    table = client.predict(GROUP_TEXT, "42", api_name="/score")
    assert table["headers"] == ["match_format_approximately", "check_answer", "check_numbers", "total", "advantage"]
    rows = table["data"]
    assert [r[:4] for r in rows] == [[1.5, 5.0, 3.5, 10.0], [1.5, 2.0, -1.5, 2.0], [0.0, -2.0, 3.5, 1.5]]
    expected = score_group(split_group(GROUP_TEXT), "42").advantages
    assert [r[4] for r in rows] == pytest.approx(expected, abs=1e-6)


def test_score_endpoint_takes_functions_scale_and_tags(client):
    table = client.predict(
        "x</think><answer>41</answer>\n---\nx</think><answer>42",
        "42",
        enabled=["check_answer_strict_nomatch", "match_format_exactly"],
        scale="none",
        reasoning_end="</think>",
        solution_start="<answer>",
        solution_end="</answer>",
        api_name="/score",
    )
    assert table["headers"] == ["match_format_exactly", "check_answer_strict_nomatch", "total", "advantage"]
    # totals 3.0 and -3.0: Dr. GRPO advantages are total - mean, no std division
    assert [r[2:] for r in table["data"]] == [[3.0, 3.0], [-3.0, -3.0]]


def test_score_endpoint_weights_are_named_after_the_registry(client):
    table = client.predict(GROUP_TEXT, "42", weight_check_answer=2.0, api_name="/score")
    assert [r[3] for r in table["data"]] == [15.0, 4.0, -0.5]  # check_answer counted twice


@pytest.mark.parametrize(
    "text,answer,message",
    [
        ("x", "", "give the gold answer"),
        # a gold answer the rewards cannot compare is refused with the fix, not blamed on the completions
        (GROUP_TEXT, "eight", "written in words: write it in digits"),
        (GROUP_TEXT, "abc", "is not a number: give the final answer in digits"),
        (GROUP_TEXT, "8 apples", "carries words: give the number alone, 8"),
        (GROUP_TEXT, "42\n---\n41", "2 gold answers for 3 completions"),
        (join_group(["x"] * (MAX_COMPLETIONS + 1)), "42", "65 completions in one request"),
    ],
)
def test_score_endpoint_errors_say_what_to_fix(client, text, answer, message):
    with pytest.raises(Exception, match=message):
        client.predict(text, answer, api_name="/score")


def test_split_group_keeps_inner_empty_blocks_and_drops_edges():
    assert split_group("\n---\na\n---\n\n---\nb\n---   \n") == ["a", "", "b"]
    assert split_group(join_group(EXAMPLE_GROUP)) == EXAMPLE_GROUP
    with pytest.raises(RewardInputError, match="the limit is 200,000"):
        split_group("x" * 300_000)


def test_read_jsonl_csv_and_run_samples(tmp_path):
    jsonl = tmp_path / "group.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in [
        {"completion": "a", "answer": "7"},
        {"completion": [{"role": "assistant", "content": "b"}]},
        "c",
    ]))
    assert read_completions_file(jsonl) == (["a", "b", "c"], "7")
    samples = tmp_path / "samples.jsonl"  # one line of a run's samples.jsonl: a whole group
    samples.write_text(json.dumps({"step": 5, "answer": "42", "completions": ["x", "y"]}) + "\n")
    assert read_completions_file(samples) == (["x", "y"], "42")
    csv_file = tmp_path / "group.csv"
    csv_file.write_text('completion,answer\n"line one\nline two",3\nsecond,3\n')
    assert read_completions_file(csv_file) == (["line one\nline two", "second"], "3")


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("bad.jsonl", "{not json", "line 1: not JSON"),
        ("bad.csv", "foo,bar\n1,2\n", "no column named one of completion"),
        ("bad.txt", "hello", "upload a .jsonl or .csv"),
        ("big.jsonl", "x" * 1_000_001, "upload at most 1,000,000 bytes"),
        ("many.jsonl", "\n".join(['"x"'] * 65), "holds 65 completions"),
        # each of these raised past the handler (csv.Error, IndexError, RecursionError): a bare "Error" on the page
        ("long-field.csv", "completion\n" + "x" * 200_000 + "\n", "row 1: not CSV this can read"),
        ("long-header.csv", "completion," + "y" * 200_000 + "\nfoo,bar\n", "header: not CSV this can read"),
        ("nested-group.jsonl", '{"completions": [{"completions": []}]}', "line 1: expected a string or an object"),
        ("deep.jsonl", "[" * 100_000, "line 1: nested too deeply"),
    ],
    ids=lambda value: value[:40] if isinstance(value, str) else None,
)
def test_bad_files_are_refused_with_the_fix(tmp_path, name, content, message):
    import csv

    path = tmp_path / name
    path.write_text(content)
    # csv's own field limit, as a fresh process has it (the data readers raise it for the whole process)
    limit = csv.field_size_limit(131_072)
    try:
        with pytest.raises(RewardInputError, match=message):
            read_completions_file(path)
    finally:
        csv.field_size_limit(limit)


def test_highlight_escapes_html_and_marks_the_answer():
    text = W + "<SOLUTION><script>alert(1)</script>42</SOLUTION>"
    group = score_group([text], "42")
    page = render_details(group)
    assert "<script>" not in page and "&lt;script&gt;" in page
    html = highlight(group.completions[0].text, group.completions[0].marks)
    assert 'title="answer (strict match)"' in html and 'title="&lt;SOLUTION&gt; x1"' in html


def _compute(code: str):
    from grpo_playground.tags import DEFAULT_TAGS
    from grpo_playground.ui.sandbox_tab import NAMES, ScoreRequest, compute, knob_defaults

    return compute(ScoreRequest(GROUP_TEXT, "42", ["check_answer"], "group", DEFAULT_TAGS.to_dict(), code, "",
                                knob_defaults(), dict.fromkeys(NAMES, 1.0)))


def test_custom_reward_joins_the_table_when_the_owner_enabled_it(monkeypatch):
    from grpo_playground.rewards.custom import ENABLE_ENV, EXAMPLE_REWARD

    monkeypatch.setenv(ENABLE_ENV, "1")
    group, _ = _compute(EXAMPLE_REWARD)
    assert group.names == ["check_answer", "custom"]
    # the example pays 1.0 when the last number equals the gold: completions 1 and 3 end in 42
    assert [c.scores["custom"] for c in group.completions] == [1.0, 0.0, 1.0]
    assert group.totals == [6.0, 2.0, -1.0]


def test_custom_reward_failure_is_a_clear_error_and_off_means_off(monkeypatch):
    from grpo_playground.rewards.custom import ENABLE_ENV

    monkeypatch.setenv(ENABLE_ENV, "1")
    with pytest.raises(RewardInputError, match="custom reward: .*"):
        _compute("def reward(completions, answer, **kwargs):\n    while True:\n        pass\n")
    monkeypatch.delenv(ENABLE_ENV)
    # disabled: an API caller who sends code is told so (and how the owner enables it); nothing runs
    with pytest.raises(RewardInputError, match=f"disabled on this server.*{ENABLE_ENV}=1"):
        _compute("def reward(completions, answer, **kwargs):\n    return [1.0] * len(completions)\n")


def test_per_row_answers_of_an_upload_are_each_completions_gold(client, tmp_path):
    """A JSONL file with one answer per row scores each completion against its own row's answer (it used the
    first row's answer for all)."""
    rows = [{"completion": f"{W}<SOLUTION>8</SOLUTION>", "answer": "8"},
            {"completion": f"{W}<SOLUTION>12</SOLUTION>", "answer": "12"}]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    completions, answer = read_completions_file(path)
    assert split_group(answer) == ["8", "12"]
    table = client.predict(join_group(completions), answer, api_name="/score")
    assert [r[1] for r in table["data"]] == [5.0, 5.0]  # check_answer: both exactly right
    same = tmp_path / "same.jsonl"  # rows that agree (or leave it out) still give one answer for the group
    same.write_text("\n".join(json.dumps(r) for r in [{"completion": "a", "answer": "7"}, {"completion": "b"}]))
    assert read_completions_file(same) == (["a", "b"], "7")
    partial = tmp_path / "partial.jsonl"
    partial.write_text("\n".join(json.dumps(r) for r in [*rows, {"completion": "c"}]))
    with pytest.raises(RewardInputError, match=r"completions \[3\] have no answer"):
        read_completions_file(partial)


@pytest.mark.parametrize("completions,fix", [
    (["no tags, 42", "no tags either, 41"], "teach the format first: run SFT"),
    ([f"{W}<SOLUTION>41</SOLUTION>"] * 3, "every completion gave the same answer: use problems nearer"),
])
def test_zero_variance_names_the_fix_before_the_reason(completions, fix):
    from grpo_playground.ui.sandbox_render import render_report

    report = render_report(score_group(completions, "42", {"check_answer": 1.0}), None, [])
    assert f"**What to do:** {fix}" in report
    assert report.index("What to do") < report.index("Why:")


def test_every_edit_is_scored_through_one_event_so_the_last_edit_wins(app_module):
    """always_last orders the runs of one event: with one event per box, a slow paste's scores could land after a
    quicker untick's and show the rewards of before. One event over every input: the last edit's result stays."""
    config = app_module.demo.get_config_file()
    report = next(c["id"] for c in config["components"] if c["props"].get("elem_id") == "sandbox-report")
    scorers = [d for d in config["dependencies"]
               if report in d["outputs"] and any(event == "change" for _, event in d["targets"])]
    assert len(scorers) == 1 and scorers[0]["trigger_mode"] == "always_last"
    assert {target for target, _ in scorers[0]["targets"]} == set(scorers[0]["inputs"])


def test_score_endpoint_offers_the_shaped_rewards_and_the_gate(client):
    # issue 39 item 11: length, repetition and the format gate in the sandbox, through the real app's API
    run_on = f"{W}<SOLUTION>41</SOLUTION> then " + "again and again " * 40
    text = join_group([f"{W}<SOLUTION>42</SOLUTION>", f"{W}<SOLUTION>41</SOLUTION>", run_on])
    enabled = ["check_answer", "cosine_scaled", "soft_overlong", "repetition_penalty"]
    plain = client.predict(text, "42", enabled=enabled, max_completion_length=200, overlong_buffer=50,
                           api_name="/score")
    assert plain["headers"] == [*enabled, "total", "advantage"]
    rows = plain["data"]
    assert rows[0][1] > 0.9 and rows[1][1] < -0.9  # cosine: right and short, wrong and short
    assert rows[0][2] == 0.0 and rows[2][2] < 0  # soft_overlong: ~170 estimated tokens of 200 (buffer 50)
    assert rows[0][3] == 0.0 and rows[2][3] < -0.5  # the repeated phrase
    assert rows[2][0] == -2.0  # check_answer: no strict match (text after </SOLUTION> on its line)
    gated = client.predict(text, "42", enabled=enabled, gate_on_format=True, max_completion_length=200,
                           overlong_buffer=50,
                           api_name="/score")["data"]
    assert gated[2][0] == -4.5 and gated[2][1] == -1.0  # the answer checks at their floor
    assert [r[:4] for r in gated[:2]] == [r[:4] for r in rows[:2]]  # a passed format changes nothing


def test_score_endpoint_takes_the_shaped_rewards_knobs_and_checks_them_as_a_recipe_does(client):
    # the run's knobs, not the defaults: "Open this group" must show the numbers the job saw
    text = join_group([f"{W}<SOLUTION>42</SOLUTION>", "a b a b a b"])
    rows = client.predict(text, "42", enabled=["cosine_scaled", "repetition_penalty"], cosine_max_len=10,
                          repetition_n_grams=2, repetition_max_penalty=-2.0, api_name="/score")["data"]
    assert rows[0][0] == 0.5  # 63 characters, past cosine_max_len 10: a right answer's floor
    assert rows[1][1] == pytest.approx(-2.0 * (1 - 2 / 5))  # bigrams: 5, distinct 2
    for knobs, words in (({"repetition_max_penalty": 1.0}, "rewards.repetition_max_penalty"),
                         ({"cosine_max_len": 0}, "rewards.cosine_max_len=0: must be at least 1"),
                         ({"overlong_buffer": 2048}, "rewards.overlong_buffer")):
        with pytest.raises(Exception, match=re.escape(words)):
            client.predict(text, "42", enabled=["soft_overlong"], api_name="/score", **knobs)
