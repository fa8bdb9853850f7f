"""Turn a scored group into what the Reward sandbox shows: a warnings block and per-completion cards with
the extracted text highlighted. Every piece of completion text is HTML-escaped (it is untrusted)."""

from __future__ import annotations

import html

from grpo_playground.rewards import DesignReport, GroupScore, Mark
from grpo_playground.rewards.group import score_text

# Long completions show their head and tail (the answer is usually at the end); marks inside are kept.
HEAD_CHARS, TAIL_CHARS = 1_500, 3_500
COLORS = {"answer": "#b7f5b0", "number": "#ffe58a", "tag": "#cfe2ff"}
# Light highlight colours need dark text in both themes (dark mode's light text on them is unreadable);
# everything else uses the theme's CSS variables. The bottom padding keeps the underscores of tags such as
# <start_working_out> on the highlight: below it, dark text on the dark theme's page vanished.
MARK_STYLE = "color:#111;background:{};padding:0 0 0.25em"


def _color(labels: list[str]) -> str:
    for kind in ("answer", "number"):
        if any(label.startswith(kind) for label in labels):
            return COLORS[kind]
    return COLORS["tag"]


def highlight(text: str, marks: list[Mark]) -> str:
    """Escaped text with each marked span in a coloured <mark title="what matched">; overlapping marks
    (a number inside the captured answer) share a span whose title lists both."""
    windows = [(0, len(text))]
    if len(text) > HEAD_CHARS + TAIL_CHARS:
        windows = [(0, HEAD_CHARS), (len(text) - TAIL_CHARS, len(text))]
    out = []
    for w_start, w_end in windows:
        if w_start > 0:
            out.append(f'<span style="color:var(--body-text-color-subdued)">\n[... {w_start - HEAD_CHARS:,} characters not shown ...]\n</span>')
        inside = [m for m in marks if m.end > w_start and m.start < w_end]
        cuts = sorted({w_start, w_end, *(max(w_start, min(w_end, x)) for m in inside for x in (m.start, m.end))})
        for a, b in zip(cuts, cuts[1:]):
            piece = html.escape(text[a:b])
            labels = [m.label for m in inside if m.start <= a and m.end >= b]
            if labels:
                title = html.escape(", ".join(labels), quote=True)
                piece = f'<mark style="{MARK_STYLE.format(_color(labels))}" title="{title}">{piece}</mark>'
            out.append(piece)
    return "".join(out)


def render_details(group: GroupScore) -> str:
    cards = []
    for i, c in enumerate(group.completions, 1):
        rows = "".join(
            f"<tr><td><code>{html.escape(name)}</code></td><td>{score_text(c.scores[name])}</td>"
            f"<td>{html.escape(c.reasons.get(name, 'custom reward (your code)'))}</td></tr>"
            for name in group.names
        )
        counts = ", ".join(f"{html.escape(tag)} x{n}" for tag, n in c.tag_counts.items())
        found = (
            f"strict match captured: <code>{html.escape(repr(c.strict_answer)[:80])}</code>"
            if c.strict_answer is not None else "strict match: <b>nothing captured</b>"
        )
        number = f"<code>{html.escape(c.number[:40])}</code>" if c.number is not None else "none"
        cards.append(
            f'<div class="sandbox-card" style="border:1px solid var(--border-color-primary);border-radius:6px;padding:8px;margin:6px 0">'
            f"<b>#{i}</b> total <b>{score_text(c.total, '+.4g')}</b>, "
            f"advantage <b>{score_text(c.advantage, '+.4g')}</b>"
            f"<div style='font-size:90%'>{found}; number read by check_numbers: {number}; tags: {counts}</div>"
            f'<pre style="white-space:pre-wrap;margin:6px 0">{highlight(c.text, c.marks) or "<i>(empty)</i>"}</pre>'
            f'<table style="font-size:90%">{rows}</table></div>'
        )
    legend = " ".join(
        f'<mark style="{MARK_STYLE.format(color)}">{kind}</mark>' for kind, color in
        [("answer (strict match)", COLORS["answer"]), ("number (check_numbers)", COLORS["number"]), ("tag", COLORS["tag"])]
    )
    return f"<div>Highlights: {legend}</div>" + "".join(cards)


def render_report(group: GroupScore | None, design: DesignReport | None, notes: list[str]) -> str:
    """Markdown: errors/notes, the zero-variance warning, the design check findings, group statistics.
    Messages quote tags such as <SOLUTION>: escaped, or Markdown would take them for HTML and drop them."""
    esc = html.escape
    lines = [f"**{esc(n)}**" for n in notes]
    if group is not None:
        if group.zero_variance:
            reason = group.zero_variance_reason
            lines.append(f"⚠️ **Zero variance: this group will not learn.** **What to do:** {esc(zero_variance_fix(group))}"
                         f"\n\nWhy: {esc(reason[0].upper() + reason[1:])}.")
        if group.unscored:
            lines.append(
                f"⚠️ **{group.unscored} of {len(group.completions)} completions could not be scored:** math-verify "
                "(answer_equivalence) did not answer within this request's time (its checkers were busy, or the "
                "answer took too long to parse). Their totals, and the group's mean, std and advantages, which "
                "depend on every total, are not shown as numbers: score again in a moment.")
        lines.append(
            f"Group of {len(group.completions)}: mean {score_text(group.mean, '+.4g')}, "
            f"std {score_text(group.std, '.4g')}, "
            f"advantages {'(total - mean) / (std + 1e-4)' if group.scale == 'group' else 'total - mean (Dr. GRPO)'}."
        )
    if design is not None:
        if design.findings:
            # one line, opened on demand: the default set's own warnings stood above every result (issue 39 item 5)
            warnings = sum(f.severity == "warning" for f in design.findings)
            count = f"{warnings} warning{'s' * (warnings != 1)}" if warnings else "notes"
            items = "".join(f"<p>{'⚠️ <b>Reward design:</b>' if f.severity == 'warning' else 'ℹ️'} {esc(f.message)}</p>"
                            for f in design.findings)
            lines.append(f"<details id='sandbox-design'><summary>{'⚠️' if warnings else 'ℹ️'} <b>Reward design check"
                         f"</b>: {count} about these weights, for any group, not this group's fix (open to read)"
                         f"</summary>{items}</details>")
        if design.ok:
            lines.append("✔ Reward design check: no completion without a clean answer outscores a wrong one.")
    return "\n\n".join(lines)


def zero_variance_fix(group: GroupScore) -> str:
    """The change that gives a zero-variance group a spread of scores, chosen by what its completions did."""
    if len(group.completions) < 2:
        return "score a group of 2 or more completions of the same prompt (GRPO's num_generations)."
    if all(c.strict_answer is None for c in group.completions):
        return ("teach the format first: run SFT (the Training tab's stage 'all' runs it before GRPO), or, if the "
                "model does write tags, make the Format tags here match them exactly.")
    if len({c.strict_answer.strip() for c in group.completions if c.strict_answer is not None}) == 1:
        return ("every completion gave the same answer: use problems nearer the model's level (harder if it is always "
                "right, easier if always wrong: the `levels` of the data source), or raise grpo.temperature "
                "(1.0-1.2) so completions differ.")
    return ("raise grpo.temperature (1.0-1.2) or num_generations so completions differ, or enable a reward that "
            "tells these completions apart.")
