"""Assembles the tabs into one Blocks app."""

from __future__ import annotations

import os
import signal
import sys

import gradio as gr

from grpo_playground.owner import weak_owner_token
from grpo_playground.serving import stop_orphans
from grpo_playground.ui import chat_tab, compare_panel, eval_panel, run_summary, sandbox_tab, training_tab
from grpo_playground.ui.skip_link import create_skip_link
from grpo_playground.ui.public_limits import configure_queue, serve
from grpo_playground.ui.public_paths import public_events
from grpo_playground.ui.request_limits import DELETE_CACHE

TITLE = "GRPO Playground"
# Page-wide style, injected with the page (Blocks(css=) moved to launch() in gradio 6, which tests do not call):
# table headers of reward names stay on one line (they wrapped one letter a line beside long completions); the
# doctor's findings are cards whose severity reads at a glance (red error, amber warning, grey info).
STYLE = """<style>
#training-samples th *, #eval-table th *, #chat-scores th { white-space: nowrap !important; }
.doctor-finding { border-left: 4px solid #9ca3af; padding: 4px 8px; margin: 6px 0; overflow-wrap: anywhere; }
.doctor-finding .doctor-severity { font-weight: 700; padding: 0 6px; border-radius: 4px; color: #fff;
  background: #6b7280; }
.doctor-error { border-left-color: #dc2626; } .doctor-error .doctor-severity { background: #dc2626; }
.doctor-warning { border-left-color: #d97706; } .doctor-warning .doctor-severity { background: #b45309; }
.doctor-knob { font-weight: 600; }
</style>"""
# Gradio 6.31's Altair plot sizes a chart to its box when it draws it, and drops a resize of the box that comes before
# vega-embed has finished: a chart shown the moment its first points arrive could be drawn 0 px wide and stay blank
# until the window was resized. Such a chart is redrawn: its box resized by a pixel and back (the plot's own observer).
REDRAW_ZERO_WIDTH_CHARTS = """setInterval(() => {
  for (const box of document.querySelectorAll('div.altair')) {
    if (box.querySelector('svg.marks')?.getAttribute('width') === '0' && box.offsetWidth > 1) {
      box.style.width = `${box.offsetWidth - 1}px`;
      requestAnimationFrame(() => requestAnimationFrame(() => { box.style.width = ''; }));
    }
  }
}, 500);"""


def build_demo() -> gr.Blocks:
    with gr.Blocks(title=TITLE, delete_cache=DELETE_CACHE) as demo:
        create_skip_link()
        gr.Markdown(f"# {TITLE}\nSFT teaches the format, GRPO teaches correctness: see why a reward moves or stays flat.")
        gr.HTML("", head=STYLE, padding=False, js_on_load=REDRAW_ZERO_WIDTH_CHARTS)
        with gr.Tabs() as tabs:
            with gr.Tab("Training", id="training") as training_shown:
                training = training_tab.create_training_tab()
            with gr.Tab("Reward sandbox", id="sandbox") as sandbox_shown:
                sandbox = sandbox_tab.create_sandbox_tab()
            with gr.Tab("Chat", id="chat") as chat:
                chat_parts = chat_tab.create_chat_tab()
            with gr.Tab("Evaluate", id="evaluate") as evaluate_shown:
                evaluate = eval_panel.create_eval_panel()
                compare = compare_panel.create_compare_panel()
        poll_the_shown_tab({training_shown: [training.timer], sandbox_shown: [], chat: [],
                            evaluate_shown: [evaluate["timer"], compare["timer"]]})
        training_tab.link_to_sandbox(training, sandbox, tabs)
        follow_disk(chat, chat_parts)
        run = training.run
        run_summary.link_next_steps([run.next_chat, run.export_chat, run.next_eval], run.view, tabs,
                                    chat_parts["pickers"][0], evaluate["checkpoints"], evaluate["data"],
                                    run.message, run.message_for)
    configure_queue(demo)
    public_events(demo)
    return demo


def poll_the_shown_tab(timers: dict[gr.Tab, list[gr.Timer]]) -> None:
    """Only the shown tab's timers tick (the Training tab's when the page opens): a tab's timers, once it was opened,
    kept ticking behind the others. Each tick of an open page costs the server a queued event and the page a render
    (the Training timer alone: ~3% of a core on the server and ~6% in the browser, on 2 cores), for every visitor of
    a public Space. A tab's select also fires when a handler switches tabs (a "next step" link)."""
    every = [timer for mine in timers.values() for timer in mine]
    for tab, mine in timers.items():
        shown = [timer in mine for timer in every]
        tab.select(lambda shown=shown: [gr.Timer(active=on) for on in shown], None, every, api_visibility="private")


def follow_disk(chat: gr.Tab, parts: dict) -> None:
    """The Chat tab's lists follow the disk: read again on page load and whenever the tab is opened, so a GGUF
    exported or a run trained since the server started is listed without pressing "Refresh list"."""
    def current():
        return [gr.Dropdown(choices=chat_tab.target_choices()) for _ in parts["pickers"]] + [chat_tab.backends_status()]

    gr.on([chat.select], current, None, [*parts["pickers"], parts["status"]], api_visibility="private")
    gr.on(None, current, None, [*parts["pickers"], parts["status"]], api_visibility="private")  # page load


def launch(demo: gr.Blocks, **kwargs) -> None:
    """Serve the app; SIGTERM (docker stop, a Space restart) exits through atexit, so the chat servers the
    app started are stopped with it instead of holding their ports and memory as orphans; those an app killed
    without atexit (SIGKILL, the out-of-memory killer) left are stopped here, from their records on disk."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    for orphan in stop_orphans():
        print(f"stopped the {orphan.get('backend')} chat server (pid {orphan.get('pid')}, port {orphan.get('port')})"
              " a killed app left running", file=sys.stderr, flush=True)
    if weak := weak_owner_token():
        print(weak, file=sys.stderr, flush=True)
    block = not kwargs.pop("prevent_thread_lock", False)
    serve(demo, server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
          server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")), **kwargs)
    if block:
        demo.block_thread()


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)
