"""An open page polls only for the tab it shows: a tab's timers stop while another tab is shown (the Training timer
alone cost ~3% of a core on the server and ~6% in the browser on 2 cores, for every visitor of a public Space, and
the Evaluate tab's two kept ticking behind the others once it had been opened).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_idle_page_browser.py
"""

from __future__ import annotations

import json

import pytest

from conftest import TIMEOUT_MS

expect = pytest.importorskip("playwright.sync_api").expect
expect.set_options(timeout=TIMEOUT_MS)

RUN_ID = "20991231-235959-idle-0001"


def test_only_the_shown_tab_polls(page, app_module, tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))  # no run yet
    names = {index: getattr(fn.fn, "__name__", "") for index, fn in app_module.demo.fns.items()}
    events: list[str] = []

    def joined(request) -> None:
        if "/queue/join" in request.url and request.post_data:
            events.append(names.get(json.loads(request.post_data).get("fn_index"), "?"))

    page.on("request", joined)
    page.wait_for_timeout(3000)  # the first ticks show the empty view
    events.clear()
    page.wait_for_timeout(6000)
    assert events.count("tick") >= 2, events  # the Training tab polls (every 2 s)
    assert not {"refresh", "view"} & set(events), events  # the Evaluate tab's timers do not tick while hidden

    run = tmp_path / RUN_ID  # a run appears on disk: the next tick shows it
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"state": "finished", "stage": "grpo", "step": 4, "max_steps": 4}))
    page.get_by_role("tab", name="2. Live run").click()
    expect(page.locator("#training-run input")).to_have_value(RUN_ID)

    page.get_by_role("tab", name="Evaluate").click()
    page.wait_for_timeout(1000)
    events.clear()
    page.wait_for_timeout(6500)
    assert {"refresh", "view"} <= set(events), events  # the evaluation's and the comparison's timers
    assert "tick" not in events, events  # the Training tab's timer stopped with it hidden
