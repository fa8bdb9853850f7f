"""The Chat tab through the app's own API (gradio_client, streaming), against a real llama.cpp server on the
packaged SmolLM2 GGUF; plus the pure helpers: folding, SOLUTION extraction and reward scoring."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from grpo_playground.models import MODELS, gguf_path
from grpo_playground.rewards import score_group
from grpo_playground.serving import LLAMA_CPP, POOL, VLLM, ChatTarget
from grpo_playground.ui.chat_scores import ReplyScores
from grpo_playground.ui.chat_tab import (MAX_GOLD_CHARS, MAX_INPUT_CHARS, MAX_SYSTEM_CHARS, STARTING_MARK,
                                         checkpoint_settings, fold_tags, for_display)

SMOLLM2_KEY = ChatTarget(LLAMA_CPP, str(gguf_path(MODELS["smollm2-135m"]))).key
FORMATTED = "12 + 7 = 19<end_working_out><SOLUTION>19</SOLUTION>"


def score_table(labels, replies, gold, rewards, settings=None) -> str:
    """The table the tab shows once every reply has finished."""
    scores = ReplyScores(gold, rewards)
    for slot, (label, reply) in enumerate(zip(labels, replies)):
        scores.add(slot, label, reply, settings[slot] if settings else None)
    return scores.markdown()


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
    result = job.result()  # raises the app's error, if any: first, as a request refused before it is queued
    return list(job), result  # never ends gradio_client's stream (iterating it would wait forever)


def test_chat_api_streams_a_real_reply_and_scores_it(client):
    updates, final = ask(client, "What is 2 + 3?")
    assert len(updates) >= 3, "the reply should stream in several updates"
    bot_1, bot_2, _, scores, notes = final[:5]
    assert bot_1[0]["role"] == "user" and text_of(bot_1[0]) == "What is 2 + 3?"
    reply = text_of(bot_1[-1])
    assert bot_1[-1]["role"] == "assistant" and reply.strip()
    assert bot_2 == [] and notes == ""
    assert "SOLUTION content" in scores and "check_answer" in scores and "check_numbers" in scores
    # the stream is monotonic: each update extends the one before (the server's start-up line comes first)
    texts = [text_of(u[0][-1]) for u in updates if u[0] and u[0][-1]["role"] == "assistant"]
    texts = [t for t in texts if not t.startswith(STARTING_MARK)]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))


def test_vllm_side_by_side_says_why_it_cannot_run_here(client):
    from grpo_playground.serving import discover_targets

    vllm_key = next(t.key for t in discover_targets() if t.backend == "vllm")
    _, final = ask(client, "What is 1 + 1?", model_2=vllm_key, max_tokens=4)
    bot_1, bot_2, _, _, notes = final[:5]
    assert text_of(bot_1[-1]).strip()
    assert text_of(bot_2[-1]).startswith("[no reply: vLLM backend cannot run here")
    assert "no NVIDIA GPU" in notes


def test_bad_requests_are_refused_with_a_reason(client, app_url):
    from gradio_client import Client
    from gradio_client.exceptions import AppError, ValidationError

    with pytest.raises(ValidationError, match=f"{MAX_INPUT_CHARS + 1:,} characters: the limit is {MAX_INPUT_CHARS:,}"):
        ask(client, "x" * (MAX_INPUT_CHARS + 1))  # refused by the server before it is queued
    with pytest.raises(ValidationError, match=f"{MAX_GOLD_CHARS + 1:,} characters: the limit is {MAX_GOLD_CHARS:,}"):
        ask(client, "hi", gold="1" * (MAX_GOLD_CHARS + 1))
    too_long = f"{MAX_SYSTEM_CHARS + 1:,} characters: the limit is {MAX_SYSTEM_CHARS:,}"
    with pytest.raises(ValidationError, match=too_long):
        client.submit("hi", "", SMOLLM2_KEY, None, None, 0.0, 0.95, 16, "s" * (MAX_SYSTEM_CHARS + 1), [],
                      api_name="/chat").result()
    with pytest.raises(AppError, match="Unknown checkpoint"):
        ask(client, "hi", model_1="llama.cpp|/etc/passwd|")
    # nothing to send: one plain line under the panes, no error on each pane (issue 22 item 6)
    fresh = Client(app_url, verbose=False)  # a session with no conversation yet
    for question, model in (("", SMOLLM2_KEY), ("   ", SMOLLM2_KEY), ("hi", None)):
        updates, final = ask(fresh, question, model_1=model)
        bot_1, bot_2, bot_3, scores, notes = final[:5]
        assert bot_1 == bot_2 == bot_3 == [] and scores == "" and len(updates) == 1
        assert notes == ("Pick at least one checkpoint (a GGUF file for llama.cpp, or a LoRA run for vLLM)." if model
                         is None else "Type a question first, then press Enter or Send.")


def test_prefilled_opening_tag_is_restored_for_the_fold():
    assert for_display(FORMATTED) == "<start_working_out>" + FORMATTED
    assert for_display("<start_working_out>" + FORMATTED) == "<start_working_out>" + FORMATTED
    assert for_display("plain answer 19") == "plain answer 19"


def test_score_table_extracts_the_solution_and_uses_the_reward_functions():
    table = score_table(["sft", "base"], [FORMATTED, "the answer is 19"], "19", ["check_answer", "check_numbers"])
    rows = table.splitlines()
    expected = score_group([FORMATTED], "19", {"check_answer": 1.0, "check_numbers": 1.0}, scale="none").completions[0]
    assert rows[2].startswith("| sft | 19 | ✓ right |") and f"**{expected.total:g}**" in rows[2]
    assert "| base | (none) | ✗ wrong |" in rows[3]  # the right number, but not in format: wrong, as eval counts it
    assert rows[0] == "| checkpoint | SOLUTION content | answer | check_answer | check_numbers | total |"
    # a gold answer written with a thousands comma still matches
    assert "| ✓ right |" in score_table(["sft"], [FORMATTED.replace("19", "1000")], "1,000", ["check_answer"])
    assert "Give the gold answer" in score_table(["sft"], [FORMATTED], "", ["check_answer"])
    assert "answer" not in score_table(["sft"], [FORMATTED], "", ["check_answer"]).splitlines()[0]


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
    tiny_key = next(t.key for t in discover_targets() if t.label == "llama.cpp · tiny · q8_0")
    _, final = ask(client, "Tom has 12 apples and buys 7 more. How many apples?", model_2=tiny_key, max_tokens=24)
    bot_1, bot_2, _, scores, notes = final[:5]
    assert text_of(bot_1[-1]).strip() and text_of(bot_2[-1]).strip() and notes == ""
    assert "smollm2-135m" in scores and "tiny · q8_0" in scores


def test_the_pickers_list_only_what_this_machine_can_run():
    """No GPU here: the registry's vLLM entries are left out of the pickers (they were 9 of 13), and the backends
    line says how many and why; the GGUF models llama.cpp serves stay."""
    from grpo_playground.serving import VLLM, discover_targets, vllm_unavailable_reason
    from grpo_playground.ui.chat_tab import backends_status, target_choices

    assert vllm_unavailable_reason() is not None, "this test expects a machine without vLLM"
    hidden = [t for t in discover_targets() if t.backend == VLLM]
    assert hidden, "the registry lists vLLM models"
    listed = [key for _, key in target_choices() if key]
    assert SMOLLM2_KEY in listed
    assert not {t.key for t in hidden} & set(listed)
    assert f"({len(hidden)} checkpoint(s) it would serve are not listed)" in backends_status()


def test_a_runs_checkpoint_is_shown_and_scored_with_its_own_tags_and_weights(tmp_path, monkeypatch):
    """A run trained with <think>/<answer> tags and its own weights: its export's GGUF (llama.cpp) and its LoRA
    folder (vLLM) are scored with those, not with the defaults (which would find no SOLUTION tag at all)."""
    from pathlib import Path

    from grpo_playground.config import apply_overrides, load_recipe, save_recipe
    from grpo_playground.contracts.layout import RECIPE_FILE
    from grpo_playground.run_layout import adapter_dir, export_dir

    run = tmp_path / "20260101-000000-think-abcd"
    recipe = Path(__file__).resolve().parents[1] / "recipes" / "tiny-cpu.yaml"
    save_recipe(apply_overrides(load_recipe(recipe), [
        "rewards.tags={reasoning_start: '<think>', reasoning_end: '</think>', solution_start: '<answer>', "
        "solution_end: '</answer>'}", "rewards.weights={check_answer: 2.0, check_numbers: 1.0}"]), run / RECIPE_FILE)
    gguf = export_dir(run, "grpo") / "run-grpo.q8_0.gguf"
    gguf.parent.mkdir(parents=True)
    gguf.write_bytes(b"GGUF")
    adapter_dir(run, "grpo").mkdir()
    reply = "12 + 7 = 19</think><answer>19</answer>"
    for target in (ChatTarget(LLAMA_CPP, str(gguf)), ChatTarget(VLLM, "tiny", str(adapter_dir(run, "grpo")))):
        tags, weights = checkpoint_settings(target)
        assert (tags.reasoning_start, tags.solution_start) == ("<think>", "<answer>")
        assert weights == {"check_answer": 2.0, "check_numbers": 1.0}
        assert for_display(reply, tags) == "<think>" + reply
        table = score_table(["run"], [reply], "19", ["check_answer"], [(tags, weights)])
        own = score_group([reply], "19", {"check_answer": 2.0}, tags, scale="none").completions[0].total
        assert "| 19 |" in table and f"**{own:g}**" in table and own > 0
    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))  # where the chat tab finds the GGUF
    assert fold_tags(ChatTarget(LLAMA_CPP, str(gguf)).key) == [("<think>", "</think>")]  # its bubble folds those
    assert fold_tags(SMOLLM2_KEY) == fold_tags(None) == [("<start_working_out>", "<end_working_out>")]
    # the same reply under the defaults: no SOLUTION match, the no-match score
    assert "| plain | (none) | ✗ wrong | -2 | **-2** |" in score_table(["plain"], [reply], "19", ["check_answer"])
    assert checkpoint_settings(ChatTarget(LLAMA_CPP, str(gguf_path(MODELS["smollm2-135m"]))))[0].solution_start == "<SOLUTION>"


@pytest.mark.slow  # two llama.cpp chat servers
def test_side_by_side_replies_stream_at_the_same_time(tmp_path, monkeypatch):
    """Two checkpoints are asked concurrently, each its own llama.cpp server: both requests are in flight at once
    (the first-hour report saw one model answer after the other). Measured on the requests, not on the tokens:
    on 2 shared cores one server's prompt processing can delay its first token past the other's whole reply."""
    import time

    from grpo_playground.serving import discover_targets
    from grpo_playground.ui import chat_tab

    exports = tmp_path / "exports"
    exports.mkdir()
    (exports / "twin.gguf").symlink_to(gguf_path(MODELS["smollm2-135m"]))  # a second file: a second server
    monkeypatch.setenv("GRPO_PLAYGROUND_EXPORTS_DIR", str(exports))
    twin_key = next(t.key for t in discover_targets() if t.label == "llama.cpp · twin")
    in_flight: dict[str, list[float]] = {}  # server url -> [request sent, reply finished]
    real_stream = chat_tab.stream_chat

    def timed_stream(base_url, *args, **kwargs):
        in_flight[base_url] = [time.monotonic()]
        yield from real_stream(base_url, *args, **kwargs)
        in_flight[base_url].append(time.monotonic())

    try:
        # start both servers first: what is measured below is the requests, not the servers' start-up
        list(chat_tab.chat("Hi", "", SMOLLM2_KEY, twin_key, "", 0.0, 0.95, 1, "Answer briefly.", [], None))
        monkeypatch.setattr(chat_tab, "stream_chat", timed_stream)
        final = list(chat_tab.chat("Count from one to ten in words.", "", SMOLLM2_KEY, twin_key, "", 0.0, 0.95, 32,
                                   "Answer briefly.", [], None))[-1]
        assert text_of(final[0][-1]).strip() and text_of(final[1][-1]).strip()
        (a_sent, a_done), (b_sent, b_done) = in_flight.values()
        assert a_sent < b_done and b_sent < a_done, f"one request waited for the other: {in_flight}"
        assert abs(a_sent - b_sent) < 0.5, f"the requests were sent {abs(a_sent - b_sent):.2f} s apart"
    finally:
        POOL.stop_all()


def test_emptied_number_boxes_are_refused_with_a_reason():
    """A number box emptied in the page arrives as None: the reason, not a bare "Error" from int(None)."""
    import gradio as gr

    from grpo_playground.ui import chat_tab

    for temperature, max_tokens, reason in ((0.0, None, "Max tokens must be between"),
                                            (None, 16, "Give a temperature and a top-p")):
        with pytest.raises(gr.Error, match=reason):
            next(chat_tab.chat("Hi", "", SMOLLM2_KEY, "", "", temperature, 0.95, max_tokens, "", [], "", None))


@pytest.mark.slow  # a llama.cpp chat server, 10 turns
def test_a_long_chat_keeps_its_panes_as_short_as_the_history_sent():
    """Every update re-sends the panes: they keep the turns the model is sent (MAX_HISTORY_MESSAGES) and the new
    one, so a visitor chatting on cannot grow a session's state and each update without end."""
    from grpo_playground.ui import chat_tab

    state = None
    try:
        for turn in range(chat_tab.MAX_HISTORY_MESSAGES // 2 + 3):
            *panes, _, _, state = list(chat_tab.chat(f"Say {turn}.", "", SMOLLM2_KEY, "", "", 0.0, 0.95, 1,
                                                     "Answer briefly.", [], "", state))[-1]
        assert len(state["display"][0]) == len(panes[0]) == chat_tab.MAX_HISTORY_MESSAGES + 2
        assert text_of(panes[0][-2]) == f"Say {turn}."
        assert len(state["messages"][0]) <= chat_tab.MAX_HISTORY_MESSAGES + 2
    finally:
        POOL.stop_all()


@pytest.mark.slow  # a llama.cpp chat server
def test_a_cancelled_chat_closes_its_stream_instead_of_generating_on_for_nobody(monkeypatch):
    """Clear (or a closed page) cancels the request's generator: its worker closes the server's stream at the next
    piece, so the server stops generating, instead of reading the whole reply for no pane."""
    import threading
    import time

    from grpo_playground.ui import chat_tab

    ended: list[str] = []
    real_stream = chat_tab.stream_chat

    def watched_stream(*args, **kwargs):
        try:
            yield from real_stream(*args, **kwargs)
            ended.append("exhausted")
        except GeneratorExit:
            ended.append("closed")
            raise

    monkeypatch.setattr(chat_tab, "stream_chat", watched_stream)
    try:
        reply = chat_tab.chat("Count from one to five hundred in words, one number per line.", "", SMOLLM2_KEY, "",
                              "", 0.0, 0.95, 2000, "Answer briefly.", [], "", None)
        for update in reply:
            if len(text_of(update[0][-1])) > 20:  # streaming: the reply has begun
                break
        reply.close()  # what Gradio does to a cancelled generator
        deadline = time.monotonic() + 10
        while ("_stream_slot" in " ".join(t.name for t in threading.enumerate()) and time.monotonic() < deadline):
            time.sleep(0.05)
        assert ended == ["closed"], f"the stream was not closed on cancel: {ended}"
    finally:
        POOL.stop_all()


@pytest.mark.slow  # llama.cpp chat servers
def test_a_visitor_chats_only_with_running_servers_and_the_owners_default(tmp_path, monkeypatch):
    """Issue 25 item 6: with an owner token set, 8 questions of a visitor rotating over 4 GGUFs started 8 llama.cpp
    servers (from the 4th on each stopping one and loading another). Now only the owner starts, switches or evicts;
    a visitor is answered by the running server and told why the others are not started; the owner's default
    (GRPO_PLAYGROUND_CHAT_DEFAULT) is the one a visitor may start, and never by evicting another."""
    from grpo_playground.owner import OWNER_TOKEN_ENV
    from grpo_playground.serving import NeedsOwner, ServerPool, discover_targets
    from grpo_playground.ui import chat_tab

    exports = tmp_path / "exports"
    exports.mkdir()
    for name in ("f16", "q8_0", "q4_k_m"):  # an export's three files: three more servers to start
        (exports / f"run-grpo.{name}.gguf").symlink_to(gguf_path(MODELS["smollm2-135m"]))
    monkeypatch.setenv("GRPO_PLAYGROUND_EXPORTS_DIR", str(exports))
    monkeypatch.setenv(OWNER_TOKEN_ENV, "owner-secret")
    keys = [SMOLLM2_KEY] + [t.key for t in discover_targets() if " · run-grpo · " in t.label]
    assert len(keys) == 4

    def ask_as(token, key):
        final = list(chat_tab.chat("Hi", "", key, "", "", 0.0, 0.95, 2, "Answer briefly.", [], token, None))[-1]
        return text_of(final[0][-1]), final[4]

    POOL.stop_all()
    try:
        reply, notes = ask_as("owner-secret", keys[0])  # the owner starts one server
        assert reply.strip() and not reply.startswith("[no reply") and notes == ""
        (started,) = POOL.describe()
        answered = [ask_as("" if i % 2 else "a guess", keys[i % 4]) for i in range(8)]
        assert [s["pid"] for s in POOL.describe()] == [started["pid"]], "a visitor started or stopped a server"
        for i, (reply, notes) in enumerate(answered):
            if i % 4 == 0:  # the running server answers visitors
                assert reply.strip() and not reply.startswith("[no reply") and notes == ""
            else:
                assert reply.startswith("[no reply: Starting a model server for llama.cpp · run-grpo · ")
                assert "needs the owner token" in notes and "(llama.cpp · smollm2-135m)" in notes  # names what runs
        # the owner's default: a visitor may start it
        monkeypatch.setenv(chat_tab.CHAT_DEFAULT_ENV, keys[1])
        reply, notes = ask_as("", keys[1])
        assert reply.strip() and not reply.startswith("[no reply") and len(POOL.describe()) == 2
    finally:
        POOL.stop_all()
    # ... but not by stopping another: a pool with one slot, taken
    pool = ServerPool(max_servers=1)
    known = {t.key: t for t in discover_targets()}
    try:
        pool.server_for(known[keys[0]])
        with pytest.raises(NeedsOwner, match="Stopping one of the 1 running servers to start one"):
            pool.server_for(known[keys[1]], may_start=True, may_evict=False)
        assert len(pool.describe()) == 1
        # every page load describes the servers: it does not wait while the pool is busy (an eviction holds the
        # lock up to 10 s a server, an adapter's hot-load minutes)
        with pool._lock:
            described = threading.Thread(target=pool.describe)
            described.start()
            described.join(2)
            assert not described.is_alive(), "describe() waited for the pool's lock"
    finally:
        pool.stop_all()


@pytest.mark.slow  # a llama.cpp chat server
def test_the_owners_default_starts_with_the_app_and_a_visitor_is_answered_by_it(monkeypatch):
    """On a restarted Space the default checkpoint's server starts as the app builds its Chat tab, so the first
    question finds it up (issue 23 item 2: Send to first token on a restart)."""
    from grpo_playground.owner import OWNER_TOKEN_ENV
    from grpo_playground.ui import chat_tab

    monkeypatch.setenv(OWNER_TOKEN_ENV, "owner-secret")
    POOL.stop_all()
    assert chat_tab.prestart_default() is None  # no default chosen: nothing starts
    monkeypatch.setenv(chat_tab.CHAT_DEFAULT_ENV, "llama.cpp · smollm2-135m")  # its label, as the owner sees it
    try:
        chat_tab.prestart_default().join(120)
        (server,) = POOL.describe()
        assert server["state"] == "running" and server["phase"] == "ready"
        final = list(chat_tab.chat("Hi", "", SMOLLM2_KEY, "", "", 0.0, 0.95, 2, "Answer briefly.", [], "", None))[-1]
        assert text_of(final[0][-1]).strip() and final[4] == ""
        assert [s["pid"] for s in POOL.describe()] == [server["pid"]]  # the visitor used it, started nothing
    finally:
        POOL.stop_all()


def test_the_chat_targets_api_names_files_without_install_paths(tmp_path, monkeypatch):
    """/chat_targets (what scripts pick checkpoints from) names a run's files from the runs folder and a packaged
    model by its file name: a visitor learns no absolute path of the install or the data root."""
    from grpo_playground.ui.chat_tab import api_targets

    runs = tmp_path / "runs"
    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(runs))
    (runs / "r1" / "export" / "grpo").mkdir(parents=True)
    (runs / "r1" / "export" / "grpo" / "r1-grpo.q8_0.gguf").write_bytes(b"GGUF")
    listed = api_targets()
    assert listed and not any(str(tmp_path) in str(t) or str(t["model"]).startswith("/") for t in listed), listed
    models = {t["model"] for t in listed}
    assert "runs/r1/export/grpo/r1-grpo.q8_0.gguf" in models
    assert Path(gguf_path(MODELS["smollm2-135m"])).name in models
