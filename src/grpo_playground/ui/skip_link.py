"""A "Skip to Start" link, the page's first stop for the keyboard (WCAG 2.4.1, bypass blocks).

Without it Tab walks the four tabs, the Training tab's three screens and every section of the recipe form (21 presses)
before it reaches Start. The link is hidden until it has the focus; Enter on it opens the Training tab's setup screen,
wherever the page is, and moves the focus to Start.
"""

from __future__ import annotations

import gradio as gr

from grpo_playground.ui.training_form import START_ID

LINK = f'<a href="#{START_ID}" class="skip-link" id="skip-to-start">Skip to Start</a>'
# off screen until focused, then shown at once (Gradio's links ease `top` over 0.2 s); theme colours keep it readable
# in dark mode too
CSS = """.skip-link { position: absolute; left: 8px; top: -48px; z-index: 1000; padding: 6px 12px; border-radius: 4px;
  background: var(--button-primary-background-fill); color: var(--button-primary-text-color); font-weight: 600;
  transition: none; }
.skip-link:focus { top: 8px; }"""
# A fragment link alone does nothing while another tab is shown (Start is hidden there): open the tabs first, then
# focus Start once it is on screen (Gradio mounts a tab's content when it is first opened).
JS = """const link = element.querySelector('.skip-link');
link.addEventListener('click', (event) => {
  event.preventDefault();
  for (const name of ['Training', '1. Set up a run']) {
    const tab = [...document.querySelectorAll('button[role="tab"]')].find((b) => b.innerText.trim() === name);
    if (tab && tab.getAttribute('aria-selected') !== 'true') tab.click();
  }
  let tries = 0;
  const focusStart = () => {
    const start = document.getElementById('%s');
    if (start && start.offsetParent !== null) { start.focus(); start.scrollIntoView({block: 'center'}); }
    else if (tries++ < 100) setTimeout(focusStart, 50);
  };
  focusStart();
});""" % START_ID


def create_skip_link() -> gr.HTML:
    """Call first inside the Blocks: the link must come before every other focusable element."""
    return gr.HTML(LINK, css_template=CSS, js_on_load=JS, padding=False, elem_id="skip-links")
