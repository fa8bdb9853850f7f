"""The setup screen's data preview: the chosen stage's first rows as the model will see them (the chat template
rendered, the gold answer the rewards get, the SFT target), and the rows skipped with their reasons, before Start.
The rows come from a child process (jobs.data_preview); this module only lays them out."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

import gradio as gr

from grpo_playground.contracts.states import TRAINED_STAGES

PREVIEW_ID = "training-data-preview"
# exact text, wrapped inside the narrow column (a prompt's long lines ran out of the panel)
PRE = "<pre style='white-space: pre-wrap; overflow-wrap: anywhere; margin: 4px 0 10px'>"


def preview_html(preview: dict) -> str:
    """One block per row: gold answer and level, the rendered prompt as exact text, the SFT target when there is one."""
    stage = preview["stage"].upper()
    rows = preview["rows"]
    skipped = preview.get("skipped") or {}
    counts = f"{len(rows)} rows shown, {preview['rows_seen']} read from the source"
    if skipped:
        reasons = "; ".join(f"{escape(reason)}: {count}" for reason, count in
                            sorted(skipped.items(), key=lambda item: -item[1]))
        counts += f"; <b>skipped {sum(skipped.values())}</b> ({reasons})"
    else:
        counts += "; none skipped"
    out = [f"<p><b>{stage} data</b> <code>{escape(preview['source'])}</code>, rendered by "
           f"<code>{escape(preview['model'])}</code>'s chat template: {counts}.</p>"]
    if not rows:
        out.append("<p>⚠ No row of this source can be trained on: see the reasons above.</p>")
    for i, row in enumerate(rows, 1):
        level = f" · level {row['level']}" if row.get("level") is not None else ""
        out.append(f"<details open><summary>Row {i} · gold answer <b>{escape(row['answer'])}</b>{level}</summary>"
                   f"<div>Prompt, exactly as the model reads it (the model writes next):</div>"
                   f"{PRE}{escape(row['prompt'])}</pre>")
        if row.get("completion") is not None:
            out.append(f"<div>SFT target (what it learns to write):</div>"
                       f"{PRE}{escape(row['completion'])}</pre>")
        out.append("</details>")
    return "\n".join(out)


def error_html(message: str) -> str:
    return f"<p>⚠ <b>No preview:</b> {escape(message)}</p>"


@dataclass
class PreviewPart:
    stage: gr.Radio
    button: gr.Button
    output: gr.HTML


def build_preview() -> PreviewPart:
    with gr.Accordion("Data preview: the first rows as the model will see them", open=False,
                      elem_id="training-data-preview-box"):
        with gr.Row(equal_height=True):
            stage = gr.Radio(list(reversed(TRAINED_STAGES)), value="grpo", label="Stage's data", scale=2,
                             info="grpo: data.grpo_source; sft: data.sft_source with its worked solutions")
            button = gr.Button("Preview data", scale=1, elem_id="training-data-preview-button")
        output = gr.HTML("<p>Press <b>Preview data</b>: the form's source, rendered by the form's model "
                         "(about 10 s: the tokenizer loads in a child process).</p>", elem_id=PREVIEW_ID)
    return PreviewPart(stage, button, output)
