"""The Chat tab: ask up to three checkpoints (base, SFT, GRPO...) the same question side by side.

Replies stream from model servers running as child processes (llama.cpp for GGUF files, vLLM for a base
model + LoRA on a GPU); this process only sends HTTP. The working-out section is folded, the SOLUTION
content is extracted and, given the gold answer, scored with the chosen reward functions.
API: `chat` (streaming), e.g. gradio_client `Client(url).submit(question, gold, model_1, ..., api_name="/chat")`.
"""

from __future__ import annotations

import queue
import threading
import time

import gradio as gr

from grpo_playground.rewards import DEFAULT_WEIGHTS, REWARDS, RewardInputError, score_group
from grpo_playground.rewards.group import explain_extraction
from grpo_playground.serving import (
    POOL,
    BackendUnavailable,
    ChatError,
    ServerFailed,
    discover_targets,
    llamacpp_unavailable_reason,
    stream_chat,
    vllm_unavailable_reason,
)
from grpo_playground.tags import DEFAULT_TAGS, system_prompt

SLOTS = 3
MAX_INPUT_CHARS = 4000
MAX_GOLD_CHARS = 200
MAX_SYSTEM_CHARS = 4000
MAX_HISTORY_MESSAGES = 20  # per checkpoint: older turns are dropped so a long chat cannot overflow the context
MAX_TOKENS_LIMIT = 8192
UPDATE_EVERY_S = 0.1  # stream to the browser in small batches, not one event per token
MAX_REPLY_S = 600  # a reply stops streaming after this long, however many tokens were asked for
NONE_CHOICE = ("(none)", "")
TAGS = DEFAULT_TAGS


def new_state() -> dict:
    return {"messages": [[] for _ in range(SLOTS)], "display": [[] for _ in range(SLOTS)]}


def target_choices() -> list[tuple[str, str]]:
    return [NONE_CHOICE] + [(t.label, t.key) for t in discover_targets()]


def for_display(reply: str) -> str:
    """The reply as the chatbot shows it: when the chat template prefilled the opening tag, the model's text
    starts inside the working-out, so the tag is put back for the fold to find it."""
    if TAGS.reasoning_end in reply and TAGS.reasoning_start not in reply.split(TAGS.reasoning_end)[0]:
        return TAGS.reasoning_start + reply
    return reply


def check_request(message: str, gold: str, keys: list[str], system: str, max_tokens: float) -> None:
    if not message or not message.strip():
        raise gr.Error("Type a question first.")
    if len(message) > MAX_INPUT_CHARS:
        raise gr.Error(f"The question is {len(message)} characters long: keep it under {MAX_INPUT_CHARS}.")
    if len(gold or "") > MAX_GOLD_CHARS:
        raise gr.Error(f"The gold answer is {len(gold)} characters long: give just the final answer (under {MAX_GOLD_CHARS}).")
    if len(system or "") > MAX_SYSTEM_CHARS:
        raise gr.Error(f"The system prompt is {len(system)} characters long: keep it under {MAX_SYSTEM_CHARS}.")
    if not any(keys):
        raise gr.Error("Pick at least one checkpoint (a GGUF file for llama.cpp, or a LoRA run for vLLM).")
    if not 1 <= int(max_tokens) <= MAX_TOKENS_LIMIT:
        raise gr.Error(f"Max tokens must be between 1 and {MAX_TOKENS_LIMIT}.")


def score_table(labels: list[str], replies: list[str | None], gold: str, rewards: list[str]) -> str:
    """Markdown: per checkpoint, what the SOLUTION tags hold and, given the gold answer, each reward."""
    weights = {name: DEFAULT_WEIGHTS.get(name, 1.0) for name in rewards or []}
    head = ["checkpoint", "SOLUTION content"] + (list(weights) + ["total"] if gold and weights else [])
    rows = []
    for label, reply in zip(labels, replies):
        if reply is None:
            continue
        strict, number, _, _ = explain_extraction(reply, TAGS)
        solution = strict if strict is not None else (f"(no strict match; first number: {number})" if number else "(none)")
        row = [label, solution.replace("|", "\\|").replace("\n", " ")[:200]]
        if gold and weights:
            try:
                scored = score_group([reply], gold, weights, TAGS, scale="none").completions[0]
                row += [f"{scored.scores[n]:g}" for n in weights] + [f"**{scored.total:g}**"]
            except (RewardInputError, ValueError) as error:
                row += ["-"] * len(weights) + [f"cannot score: {error}"]
        rows.append(row)
    if not rows:
        return ""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]
    if not gold:
        lines.append("\nGive the gold answer to score the replies with the rewards.")
    return "\n".join(lines)


def backends_status() -> str:
    lines = []
    for name, reason in (("llama.cpp", llamacpp_unavailable_reason()), ("vLLM", vllm_unavailable_reason())):
        lines.append(f"- **{name}**: {'available' if reason is None else reason}")
    for server in POOL.describe():
        lines.append(f"- running: {server['backend']} `{server['model']}` on port {server['port']}: {server['state']}")
    return "\n".join(lines)


def _stream_slot(slot: int, target, messages: list[dict], settings: dict, out: queue.Queue) -> None:
    """Worker thread: start/reuse the server, stream the reply into `out` as (slot, kind, text)."""
    server = None
    try:
        server, model_name, crash = POOL.server_for(target)
        if crash:
            out.put((slot, "note", f"The {target.backend} server had crashed and was restarted.\n{crash}"))
        deadline = time.monotonic() + MAX_REPLY_S
        for piece in stream_chat(server.base_url, model_name, messages, **settings):
            out.put((slot, "text", piece))
            if time.monotonic() > deadline:
                out.put((slot, "note", f"stopped after {MAX_REPLY_S} s"))
                break
    except (BackendUnavailable, ServerFailed, FileNotFoundError, ValueError) as error:
        out.put((slot, "error", str(error)))
    except ChatError as error:
        crashed = server is not None and server.state().startswith("crashed")
        detail = server.failure_message() if crashed else str(error)
        out.put((slot, "error", f"{detail}\nSend again to restart it, or press 'Restart backends'."))
    finally:
        out.put((slot, "done", ""))


def chat(message: str, gold: str, model_1: str, model_2: str, model_3: str, temperature: float, top_p: float,
         max_tokens: float, system: str, rewards: list[str], state: dict | None):
    """Send one question to every chosen checkpoint; yields (chatbot 1..3, scores, notes, state) as replies stream."""
    keys = [model_1, model_2, model_3]
    check_request(message, gold, keys, system, max_tokens)
    known = {t.key: t for t in discover_targets()}
    unknown = [k for k in keys if k and k not in known]
    if unknown:
        raise gr.Error(f"Unknown checkpoint {unknown[0]!r}: press 'Refresh list' and pick one from the list.")
    state = state or new_state()
    settings = {"temperature": float(temperature), "top_p": float(top_p), "max_tokens": int(max_tokens)}
    gold = (gold or "").strip()
    replies: list[str | None] = [None] * SLOTS
    finished: list[str | None] = [None] * SLOTS  # replies are scored once complete
    notes: list[str] = []
    out: queue.Queue = queue.Queue()
    running = 0
    for slot, key in enumerate(keys):
        if not key:
            continue
        history = state["messages"][slot][-MAX_HISTORY_MESSAGES:] + [{"role": "user", "content": message}]
        state["messages"][slot] = history
        state["display"][slot] = state["display"][slot] + [{"role": "user", "content": message},
                                                           {"role": "assistant", "content": ""}]
        replies[slot] = ""
        request = [{"role": "system", "content": system or system_prompt(TAGS)}] + history
        threading.Thread(target=_stream_slot, args=(slot, known[key], request, settings, out), daemon=True).start()
        running += 1

    def view():
        for slot, reply in enumerate(replies):
            if reply is not None:
                state["display"][slot][-1]["content"] = for_display(reply)
        labels = [known[k].label if k else "" for k in keys]
        return (*[list(d) for d in state["display"]], score_table(labels, finished, gold, rewards),
                "\n\n".join(notes), state)

    yield view()
    last = time.monotonic()
    while running:
        try:
            slot, kind, text = out.get(timeout=UPDATE_EVERY_S)
        except queue.Empty:
            continue
        if kind == "text":
            replies[slot] += text
        elif kind == "done":
            running -= 1
            finished[slot] = replies[slot]
        else:
            notes.append(f"**{known[keys[slot]].label}**: {text}")
            if kind == "error" and not replies[slot]:
                replies[slot] = f"[no reply: {text.splitlines()[0]}]"
        if time.monotonic() - last >= UPDATE_EVERY_S or not running:
            last = time.monotonic()
            yield view()
    for slot, reply in enumerate(replies):
        if reply is not None:
            state["messages"][slot].append({"role": "assistant", "content": reply})
    yield view()


def restart_backends(model_1: str, model_2: str, model_3: str) -> str:
    known = {t.key: t for t in discover_targets()}
    for key in (model_1, model_2, model_3):
        if key in known:
            POOL.restart(known[key])
    return backends_status() + "\n\nStopped the chosen checkpoints' servers: the next question starts them again."


def create_chat_tab() -> dict:
    choices = target_choices()
    default = choices[1][1] if len(choices) > 1 else ""
    gr.Markdown(
        "Ask the same question to up to three checkpoints (e.g. base, SFT, GRPO). GGUF files chat through "
        "llama.cpp (export a run with `python -m pipelines.export --run RUN_DIR --gguf q4_k_m`); LoRA runs "
        "through vLLM on a GPU. The working-out is folded; give the gold answer to score each reply."
    )
    pickers, chatbots = [], []
    with gr.Row():
        for slot in range(SLOTS):
            with gr.Column():
                pickers.append(gr.Dropdown(choices, value=default if slot == 0 else "", label=f"Checkpoint {slot + 1}",
                                           allow_custom_value=True, elem_id=f"chat-model-{slot + 1}"))
                chatbots.append(gr.Chatbot(label=f"Checkpoint {slot + 1}", height=420, elem_id=f"chat-bot-{slot + 1}",
                                           reasoning_tags=[(TAGS.reasoning_start, TAGS.reasoning_end)]))
    with gr.Row():
        question = gr.Textbox(label="Question", lines=2, max_length=MAX_INPUT_CHARS, scale=4, elem_id="chat-question")
        gold = gr.Textbox(label="Gold answer (optional, scores the replies)", max_length=MAX_GOLD_CHARS, scale=1,
                          elem_id="chat-gold")
    with gr.Row():
        send = gr.Button("Send", variant="primary", elem_id="chat-send")
        clear = gr.Button("Clear conversation")
        refresh = gr.Button("Refresh list")
        restart = gr.Button("Restart backends")
    scores = gr.Markdown(elem_id="chat-scores")
    notes = gr.Markdown(elem_id="chat-notes")
    with gr.Accordion("Sampling, system prompt, rewards", open=False):
        with gr.Row():
            temperature = gr.Slider(0.0, 2.0, value=0.8, step=0.05, label="temperature")
            top_p = gr.Slider(0.05, 1.0, value=0.95, step=0.05, label="top_p")
            max_tokens = gr.Number(2048, precision=0, minimum=1, maximum=MAX_TOKENS_LIMIT, label="max tokens")
        system = gr.Textbox(system_prompt(TAGS), label="System prompt", lines=4, max_length=MAX_SYSTEM_CHARS)
        rewards = gr.CheckboxGroup(list(REWARDS), value=list(DEFAULT_WEIGHTS), label="Rewards used for scoring")
    status = gr.Markdown(backends_status(), elem_id="chat-backends")
    state = gr.State(None)

    inputs = [question, gold, *pickers, temperature, top_p, max_tokens, system, rewards, state]
    outputs = [*chatbots, scores, notes, state]
    send.click(chat, inputs, outputs, api_name="chat", concurrency_limit=SLOTS, concurrency_id="chat")
    question.submit(chat, inputs, outputs, api_name=False, concurrency_id="chat")
    clear.click(lambda: ([], [], [], "", "", None), None, outputs, api_name=False)
    refresh.click(lambda: [gr.Dropdown(choices=target_choices()) for _ in range(SLOTS)] + [backends_status()],
                  None, [*pickers, status], api_name=False)
    restart.click(restart_backends, pickers, status, api_name=False)
    return {"pickers": pickers, "chatbots": chatbots, "question": question, "gold": gold, "send": send,
            "scores": scores, "notes": notes, "status": status, "state": state}
