"""The Chat tab in a real browser: a question streamed to a real llama.cpp server (the packaged SmolLM2 GGUF),
format tags shown literally, replies scored against the gold answer.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_chat_browser.py
"""

from __future__ import annotations

from playwright.sync_api import expect

from grpo_playground.serving import POOL

REPLY_TIMEOUT_MS = 120_000  # the first question starts the llama.cpp server


def test_question_streams_a_reply_with_tags_visible_and_scores(page, screenshot):
    page.get_by_role("tab", name="Chat").click()
    page.locator("#chat-question textarea").fill("Repeat exactly: <SOLUTION>5</SOLUTION>")
    page.locator("#chat-gold textarea").fill("5")
    page.locator("#chat-send").click()
    bot = page.locator("#chat-bot-1")
    try:
        # Tags are shown as text, not swallowed as unknown HTML elements.
        expect(bot).to_contain_text("<SOLUTION>5</SOLUTION>", timeout=REPLY_TIMEOUT_MS)
        expect(page.locator("#chat-scores")).to_contain_text("check_answer", timeout=REPLY_TIMEOUT_MS)
        expect(page.locator("#chat-scores")).to_contain_text("llama.cpp · smollm2-135m")
        # scores appear when the reply is complete, so the reply is on the page by now
        expect(bot.locator('[data-testid="bot"]').last).not_to_be_empty()
        screenshot(page, "reply")
    finally:
        POOL.stop_all()


def test_enter_sends_panes_are_titled_and_an_empty_question_says_so_once(page, screenshot):
    """Issue 22 item 6: Enter did not send, panes were titled "Checkpoint 1/2", and an empty question painted a red
    Error badge over every pane."""
    page.get_by_role("tab", name="Chat").click()
    bot = page.locator("#chat-bot-1")
    expect(bot).to_contain_text("llama.cpp · smollm2-135m")  # the pane's title: its checkpoint
    question = page.locator("#chat-question textarea")
    question.fill("")
    question.press("Enter")
    expect(page.locator("#chat-notes")).to_contain_text("Type a question first, then press Enter or Send.")
    expect(page.locator(".error")).to_have_count(0)  # no error badge anywhere
    try:
        question.fill("What is 2 + 3? Answer with a number.")
        question.press("Enter")
        expect(bot.locator('[data-testid="bot"]').last).not_to_be_empty(timeout=REPLY_TIMEOUT_MS)
        expect(page.locator("#chat-notes")).not_to_contain_text("Type a question first")
        screenshot(page, "enter-sends")
    finally:
        POOL.stop_all()


def test_clear_during_a_reply_empties_the_panes_for_good(page):
    """Clear cancels the streaming reply: before, the running reply refilled the cleared panes (and the history
    came back with its next update)."""
    page.get_by_role("tab", name="Chat").click()
    bot = page.locator("#chat-bot-1")
    try:
        page.get_by_text("Sampling, system prompt, rewards").click()
        # at temperature 2 the small model rambles on well past the Clear (a short reply could end before it)
        for label, value in (("temperature", "2"), ("top_p", "1")):
            box = page.get_by_label(f"number input for {label}")
            box.fill(value)
            box.press("Tab")
        page.locator("#chat-question textarea").fill("Count from one to three hundred in words, one per line.")
        page.locator("#chat-send").click()
        expect(bot.locator('[data-testid="bot"]').last).not_to_be_empty(timeout=REPLY_TIMEOUT_MS)  # streaming
        page.get_by_role("button", name="Clear conversation").click()
        expect(bot.locator('[data-testid="user"]')).to_have_count(0)
        page.wait_for_timeout(3000)  # a running reply's next updates would have landed by now (every 0.1 s)
        expect(bot.locator('[data-testid="user"]')).to_have_count(0)
        expect(bot.locator('[data-testid="bot"]')).to_have_count(0)
    finally:
        POOL.stop_all()
