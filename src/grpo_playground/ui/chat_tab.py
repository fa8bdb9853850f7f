"""The Chat tab: ask up to three checkpoints (base, SFT, GRPO...) the same question side by side.

Replies stream from model servers running as child processes (llama.cpp for GGUF files, vLLM for a base
model + LoRA on a GPU); this process only sends HTTP. The working-out section is folded, the SOLUTION
content is extracted and, given the gold answer, scored with the chosen reward functions. A checkpoint of a run
(its LoRA folder or a GGUF of its export) is prompted, shown and scored with the run's own tags and reward weights
(grpo_playground.config.run_settings), as eval does; anything else with the defaults.
API: `chat` (streaming), e.g. gradio_client `Client(url).submit(question, gold, model_1, ..., api_name="/chat")`.

With an owner token set (a public Space), a visitor's question goes only to servers already running and to the
owner's default checkpoint (env GRPO_PLAYGROUND_CHAT_DEFAULT: a checkpoint's key, label or model path): starting,
restarting, evicting a server or hot-loading an adapter (each a model load, maybe a download with the owner's
HF_TOKEN) needs the owner token. While a server starts, its pane says what it is doing and for how long.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from grpo_playground.gpu_share import GpuBusy
from grpo_playground.owner import check_owner, owner_token_required
from grpo_playground.rewards import DEFAULT_WEIGHTS, REWARDS
from grpo_playground.config.run_settings import run_settings
from grpo_playground.run_layout import exports_dir, run_of, runs_dir
from grpo_playground.serving import (
    LLAMA_CPP,
    POOL,
    VLLM,
    BackendUnavailable,
    ChatError,
    NeedsOwner,
    ServerFailed,
    discover_targets,
    llamacpp_unavailable_reason,
    stream_chat,
    vllm_unavailable_reason,
)
from grpo_playground.tags import DEFAULT_TAGS, Tags, system_prompt
from grpo_playground.ui.chat_scores import ReplyScores
from grpo_playground.ui.public_paths import public_api
from grpo_playground.ui.request_limits import visitor_of_request
from grpo_playground.ui.handlers import handler, spread

SLOTS = 3
MAX_INPUT_CHARS = 4000
MAX_GOLD_CHARS = 200
MAX_SYSTEM_CHARS = 4000
MAX_HISTORY_MESSAGES = 20  # per checkpoint: older turns are dropped so a long chat cannot overflow the context
MAX_TOKENS_LIMIT = 8192
UPDATE_EVERY_S = 0.1  # stream to the browser in small batches, not one event per token
MAX_REPLY_S = 600  # a reply stops streaming after this long, however many tokens were asked for
PROGRESS_EVERY_S = 1.0  # how often a pane waiting for its server to start redraws its elapsed time
STARTING_MARK = "⚙"  # opens a pane's text while its server starts (replaced by the reply)
CHAT_DEFAULT_ENV = "GRPO_PLAYGROUND_CHAT_DEFAULT"  # the checkpoint a visitor may start (owner's choice)
NONE_CHOICE = ("(none)", "")
DEFAULT_SYSTEM = system_prompt(DEFAULT_TAGS)  # the box's text: a checkpoint of a run gets its run's prompt instead


def new_state() -> dict:
    return {"messages": [[] for _ in range(SLOTS)], "display": [[] for _ in range(SLOTS)]}


def _unavailable() -> dict[str, str | None]:
    """Backend name -> why it cannot run on this machine (None: it can)."""
    return {LLAMA_CPP: llamacpp_unavailable_reason(), VLLM: vllm_unavailable_reason()}


def runnable_targets() -> list:
    """The checkpoints this machine can chat with: no vLLM entries without a GPU, no GGUF without llama.cpp."""
    blocked = _unavailable()
    return [t for t in discover_targets() if blocked.get(t.backend) is None]


def target_choices() -> list[tuple[str, str]]:
    return [NONE_CHOICE] + [(t.label, t.key) for t in runnable_targets()]


def api_targets() -> list[dict]:
    """The checkpoints this machine can chat with, as the pickers list them (API /chat_targets); files named from
    the runs or exports folder, never by an absolute path (a visitor learns nothing of the install)."""
    return [{"key": t.key, "label": t.label, "backend": t.backend, "model": _public(t.model),
             "lora": _public(t.lora) if t.lora else None} for t in runnable_targets()]


def _public(location: str) -> str:
    """A model's location as a visitor may see it: runs/..., exports/..., a hub id, or a bare file name."""
    path = Path(location)
    if not path.is_absolute():
        return location  # a hub id
    for root, name in ((runs_dir(), "runs"), (exports_dir(), "exports")):
        if path.is_relative_to(root):
            return f"{name}/{path.relative_to(root)}"
    return path.name


def checkpoint_settings(target) -> tuple[Tags, dict[str, float]]:
    """The tags and reward weights a chat target was trained with: its run's recipe, else the defaults."""
    run = run_of(target.lora or target.model)
    try:
        settings = run_settings(run) if run else None
    except (OSError, ValueError):  # an unreadable recipe: chat still works, with the defaults
        settings = None
    return (settings.tags, settings.reward_weights) if settings else (DEFAULT_TAGS, dict(DEFAULT_WEIGHTS))


def for_display(reply: str, tags: Tags = DEFAULT_TAGS) -> str:
    """The reply as the chatbot shows it: when the chat template prefilled the opening tag, the model's text
    starts inside the working-out, so the tag is put back for the fold to find it."""
    if tags.reasoning_end in reply and tags.reasoning_start not in reply.split(tags.reasoning_end)[0]:
        return tags.reasoning_start + reply
    return reply


def pane_title(key: str | None, slot: int) -> str:
    """A pane is titled by the checkpoint it talks to."""
    target = {t.key: t for t in discover_targets()}.get(key) if key else None
    return target.label if target else f"Checkpoint {slot + 1}: pick one above"


def fold_tags(key: str | None) -> list[tuple[str, str]]:
    """The (start, end) pair a slot's chatbot folds: the picked checkpoint's own reasoning tags."""
    target = {t.key: t for t in discover_targets()}.get(key) if key else None
    tags = checkpoint_settings(target)[0] if target else DEFAULT_TAGS
    return [(tags.reasoning_start, tags.reasoning_end)]


def nothing_to_send(message: str, keys: list[str]) -> str | None:
    """Why a question cannot go out yet (said once, under the panes, not as an error on each pane), or None."""
    if not message or not message.strip():
        return "Type a question first, then press Enter or Send."
    if not any(keys):
        return "Pick at least one checkpoint (a GGUF file for llama.cpp, or a LoRA run for vLLM)."
    return None


def check_request(message: str, gold: str, keys: list[str], system: str, max_tokens: float) -> None:
    if len(message) > MAX_INPUT_CHARS:
        raise gr.Error(f"The question is {len(message)} characters long: keep it under {MAX_INPUT_CHARS}.")
    if len(gold or "") > MAX_GOLD_CHARS:
        raise gr.Error(f"The gold answer is {len(gold)} characters long: give just the final answer (under {MAX_GOLD_CHARS}).")
    if len(system or "") > MAX_SYSTEM_CHARS:
        raise gr.Error(f"The system prompt is {len(system)} characters long: keep it under {MAX_SYSTEM_CHARS}.")
    if max_tokens is None or not 1 <= int(max_tokens) <= MAX_TOKENS_LIMIT:
        raise gr.Error(f"Max tokens must be between 1 and {MAX_TOKENS_LIMIT}.")


def backends_status() -> str:
    lines = []
    blocked = _unavailable()
    hidden: dict[str, int] = {}
    for target in discover_targets():
        if blocked.get(target.backend):
            hidden[target.backend] = hidden.get(target.backend, 0) + 1
    for backend, name in ((LLAMA_CPP, "llama.cpp"), (VLLM, "vLLM")):
        reason = blocked[backend]
        line = f"- **{name}**: {'available' if reason is None else reason}"
        if hidden.get(backend):
            line += f" ({hidden[backend]} checkpoint(s) it would serve are not listed)"
        lines.append(line)
    for server in POOL.describe():
        doing = server["progress"] or (f"ready (started in {server['startup_s']:.0f} s)" if server["startup_s"] is not None
                                       and server["state"] == "running" and server["phase"] == "ready" else server["state"])
        # no local port: the page is public, and only the app talks to its servers
        lines.append(f"- running: {server['backend']} `{server['model']}`: {doing}")
    return "\n".join(lines)


def owner_default(targets: dict) -> str | None:
    """The key of the checkpoint the owner lets visitors start (CHAT_DEFAULT_ENV), if it is listed."""
    wanted = os.environ.get(CHAT_DEFAULT_ENV, "").strip()
    return next((k for k, t in targets.items() if wanted and wanted in (k, t.label, t.model)), None)


def prestart_default() -> threading.Thread | None:
    """Start the owner's default checkpoint's server in the background as the app starts, so that on a restarted
    Space it is up (its compile cache is on the data root) before the first question; None without a default."""
    runnable = {t.key: t for t in runnable_targets()}
    key = owner_default(runnable)
    if key is None:
        return None
    thread = threading.Thread(target=_prestart, args=(runnable[key],), daemon=True, name="chat-prestart")
    thread.start()
    return thread


def _prestart(target) -> None:
    try:
        POOL.server_for(target)
    except (BackendUnavailable, ServerFailed, GpuBusy, ChatError, FileNotFoundError, ValueError) as error:
        print(f"[chat] the default checkpoint {target.label} did not start: {error}", flush=True)


def is_owner(token: str | None) -> bool:
    try:
        check_owner(token, "loading a model")
    except PermissionError:
        return False
    return True


def _stream_slot(slot: int, target, messages: list[dict], settings: dict, out: queue.Queue, may_start: bool,
                 may_evict: bool, cancelled: threading.Event) -> None:
    """Worker thread: start/reuse the server, stream the reply into `out` as (slot, kind, text); a cancelled
    request (Clear pressed, the page closed) closes its stream, so the server stops generating for nobody."""
    server = None
    try:
        server, model_name, crash = POOL.server_for(target, may_start=may_start, may_evict=may_evict)
        if crash:
            out.put((slot, "note", f"The {target.backend} server had crashed and was restarted.\n{crash}"))
        deadline = time.monotonic() + MAX_REPLY_S
        for piece in stream_chat(server.base_url, model_name, messages, **settings):
            out.put((slot, "text", piece))
            if cancelled.is_set():
                break
            if time.monotonic() > deadline:
                out.put((slot, "note", f"stopped after {MAX_REPLY_S} s"))
                break
    except (BackendUnavailable, ServerFailed, NeedsOwner, GpuBusy, FileNotFoundError, ValueError) as error:
        out.put((slot, "error", str(error)))
    except ChatError as error:
        crashed = server is not None and server.state().startswith("crashed")
        detail = server.failure_message() if crashed else str(error)
        out.put((slot, "error", f"{detail}\nSend again to restart it, or press 'Restart backends'."))
    finally:
        out.put((slot, "done", ""))


@dataclass
class ChatRequest:
    """The chat's inputs in the order the tab wires them (/chat's parameters)."""
    message: str | None
    gold: str | None
    model_1: str | None
    model_2: str | None
    model_3: str | None
    temperature: float | None
    top_p: float | None
    max_tokens: float | None
    system: str | None
    rewards: list | None
    token: str | None = ""  # the owner token, which lets this request start servers (see the module's docstring)
    state: dict | None = None  # the conversation (new_state's shape); None: a new one
    request: gr.Request | None = None  # whose the replies' math-verify questions are (Gradio passes it)


@dataclass
class ChatView:
    panes: list = spread()  # each checkpoint's chatbot messages
    scores: str = ""
    notes: str = ""
    state: dict | None = None


# its checks raise gr.Error themselves; a backend's failure is said in its pane, not raised
@handler(ChatRequest, errors=())
def chat(req: ChatRequest):
    """Send one question to every chosen checkpoint; yields (chatbot 1..3, scores, notes, state) as replies stream.
    `token`: the owner token, which lets this request start servers (visitors: see the module's docstring);
    `request`: whose the replies' math-verify questions are (Gradio passes it)."""
    message, gold, system, rewards, max_tokens = req.message, req.gold, req.system, req.rewards, req.max_tokens
    temperature, top_p, token, state = req.temperature, req.top_p, req.token, req.state
    keys = [req.model_1, req.model_2, req.model_3]
    state = state or new_state()
    missing = nothing_to_send(message, keys)
    if missing:
        yield ChatView([list(d) for d in state["display"]], "", missing, state)
        return
    check_request(message, gold, keys, system, max_tokens)
    known = {t.key: t for t in discover_targets()}
    unknown = [k for k in keys if k and k not in known]
    if unknown:
        raise gr.Error(f"Unknown checkpoint {unknown[0]!r}: press 'Refresh list' and pick one from the list.")
    owner, default = is_owner(token), owner_default(known)
    trained = [checkpoint_settings(known[k]) if k else (DEFAULT_TAGS, dict(DEFAULT_WEIGHTS)) for k in keys]
    if temperature is None or top_p is None:
        raise gr.Error("Give a temperature and a top-p (the boxes were left empty).")
    settings = {"temperature": float(temperature), "top_p": float(top_p), "max_tokens": int(max_tokens)}
    gold = (gold or "").strip()
    replies: list[str | None] = [None] * SLOTS
    scores = ReplyScores(gold, rewards, visitor_of_request(req.request))  # each reply scored once, when it finishes
    notes: list[str] = []
    out: queue.Queue = queue.Queue()
    cancelled = threading.Event()
    running = 0
    for slot, key in enumerate(keys):
        if not key:
            continue
        history = state["messages"][slot][-MAX_HISTORY_MESSAGES:] + [{"role": "user", "content": message}]
        state["messages"][slot] = history
        # the panes show what the model is sent (each update re-sends them: a long chat must not grow without end)
        state["display"][slot] = state["display"][slot][-MAX_HISTORY_MESSAGES:] + [{"role": "user", "content": message},
                                                           {"role": "assistant", "content": ""}]
        replies[slot] = ""
        tags = trained[slot][0]
        prompt = system_prompt(tags) if not system or system == DEFAULT_SYSTEM else system
        sent = [{"role": "system", "content": prompt}] + history
        threading.Thread(target=_stream_slot, args=(slot, known[key], sent, settings, out, owner or key == default,
                                                    owner, cancelled), daemon=True).start()
        running += 1
    waiting: list[str | None] = [None] * SLOTS  # a pane's server start, while it has no text yet

    def view():
        for slot, reply in enumerate(replies):
            if reply is not None:
                content = for_display(reply, trained[slot][0])
                state["display"][slot][-1]["content"] = content or (waiting[slot] or "")
        return ChatView([list(d) for d in state["display"]], scores.markdown(), "\n\n".join(notes), state)

    try:
        yield view()
        last = shown = time.monotonic()
        while running:
            try:
                slot, kind, text = out.get(timeout=UPDATE_EVERY_S)
            except queue.Empty:
                if time.monotonic() - shown >= PROGRESS_EVERY_S:
                    shown = time.monotonic()
                    for slot, key in enumerate(keys):
                        progress = POOL.progress(known[key]) if key and not replies[slot] else None
                        waiting[slot] = f"{STARTING_MARK} {known[key].backend} server {progress}" if progress else None
                    yield view()
                continue
            if kind == "text":
                replies[slot] += text
            elif kind == "done":
                running -= 1
                waiting[slot] = None
                scores.add(slot, known[keys[slot]].label, replies[slot], trained[slot])
            else:
                waiting[slot] = None
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
    finally:  # Clear, a closed page or the end: no stream goes on for nobody
        cancelled.set()


@dataclass
class RestartRequest:
    model_1: str | None
    model_2: str | None
    model_3: str | None
    token: str | None = ""


@handler(RestartRequest, errors=PermissionError)
def restart_backends(req: RestartRequest) -> str:
    check_owner(req.token, "restarting the chat servers")  # a stranger could otherwise cycle 400 MB loads
    known = {t.key: t for t in discover_targets()}
    for key in (req.model_1, req.model_2, req.model_3):
        if key in known:
            POOL.restart(known[key])
    return backends_status() + "\n\nStopped the chosen checkpoints' servers: the next question starts them again."


def create_chat_tab() -> dict:
    choices = target_choices()
    # the owner's default first (its server starts with the app), else the first entry
    default = owner_default({t.key: t for t in runnable_targets()}) or (choices[1][1] if len(choices) > 1 else "")
    prestart_default()
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
                # empty panes small, growing with the replies: at 420 px fixed the question box and Send sat
                # below the fold of a 1280x800 screen
                chatbots.append(gr.Chatbot(label=pane_title(default if slot == 0 else "", slot), height=None,
                                           min_height=200, max_height=480,
                                           elem_id=f"chat-bot-{slot + 1}",
                                           reasoning_tags=fold_tags(None)))
    with gr.Row():
        # one line grows to six: Enter sends (a multi-line box would take Enter as a new line)
        question = gr.Textbox(label="Question", lines=1, max_lines=6, max_length=MAX_INPUT_CHARS, scale=4,
                              placeholder="Ask, then press Enter", elem_id="chat-question")
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
        system = gr.Textbox(DEFAULT_SYSTEM, label="System prompt", lines=4, max_length=MAX_SYSTEM_CHARS,
                            info="Left as it is, a run's checkpoint gets its own run's prompt (with its tags).")
        rewards = gr.CheckboxGroup(list(REWARDS), value=list(DEFAULT_WEIGHTS), label="Rewards used for scoring")
    status = gr.Markdown(backends_status(), elem_id="chat-backends")
    if owner_token_required():
        gr.Markdown("Visitors chat with the model servers already running (listed above) and the owner's default "
                    "checkpoint; starting, switching or restarting a model server needs the owner token.",
                    elem_id="chat-visitors")
    owner_token = gr.Textbox("", label="Owner token (to start, switch or restart model servers)", type="password",
                             max_length=256, visible=owner_token_required(), elem_id="chat-owner-token")
    state = gr.State(None)

    inputs = [question, gold, *pickers, temperature, top_p, max_tokens, system, rewards, owner_token, state]
    outputs = [*chatbots, scores, notes, state]
    public_api(api_targets, api_name="chat_targets")
    # one event for Send and Enter (each alone let Enter then Send stream twice into the same panes); Clear cancels
    # it, or the running reply refilled the cleared panes and brought the history back
    sending = gr.on([send.click, question.submit], chat, inputs, outputs, api_name="chat", concurrency_limit=SLOTS,
                    concurrency_id="chat")
    # the cancel first, then the clearing: done together, an update the reply had in flight landed after the clear
    clear.click(None, None, None, api_name=False, cancels=[sending]).then(
        lambda: ([], [], [], "", "", None), None, outputs, api_name=False)
    refresh.click(lambda: [gr.Dropdown(choices=target_choices()) for _ in range(SLOTS)] + [backends_status()],
                  None, [*pickers, status], api_name=False)
    restart.click(restart_backends, [*pickers, owner_token], status, api_name=False)
    for slot, (picker, chatbot) in enumerate(zip(pickers, chatbots)):  # titled by its checkpoint, folding its tags
        picker.change(lambda key, slot=slot: gr.Chatbot(reasoning_tags=fold_tags(key), label=pane_title(key, slot)),
                      picker, chatbot, api_name=False)
    return {"pickers": pickers, "chatbots": chatbots, "question": question, "gold": gold, "send": send,
            "scores": scores, "notes": notes, "status": status, "state": state}
