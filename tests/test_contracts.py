"""The contracts layer (grpo_playground.contracts): what crosses a process boundary, defined once.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_contracts.py
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading

from grpo_playground.contracts.layout import base_gguf_of
from grpo_playground.contracts.metrics import LOSS, REWARD, decode_record, encode_record, read_records
from grpo_playground.contracts.process import (is_alive, log_tail, process_start_ticks, write_json_atomic,
                                               write_text_atomic)
from grpo_playground.contracts.states import ACTIVE_STATES, JobState
from grpo_playground.jobs.feed import RunFeed
from grpo_playground.contracts.layout import METRICS_FILE
from grpo_playground.experiments.report import reward_curve
from grpo_playground.training.run_folder import RunFolder
from grpo_playground.ui.run_views import doctor_findings


def test_nan_in_the_metrics_reaches_the_uis_fallback_doctor(tmp_path):
    # Before: the job wrote NaN as the string "nan" and the UI's reader kept the string, so the doctor the UI runs
    # when the job wrote no doctor.jsonl (a job killed before its callback) never fired its NaN rule.
    rows = [{"stage": "grpo", "step": 1, LOSS: 0.5}, {"stage": "grpo", "step": 2, LOSS: math.nan}]
    (tmp_path / METRICS_FILE).write_text("".join(encode_record(r) for r in rows))
    assert '"loss": "nan"' in (tmp_path / METRICS_FILE).read_text()  # strict JSON on disk, as it always was
    feed = RunFeed(tmp_path)
    feed.poll()
    assert math.isnan(feed.metrics[1][LOSS])
    assert [f["rule"] for f in doctor_findings([], feed.metrics)] == ["nan"]


def test_the_codec_round_trips_non_finite_floats_and_refuses_what_is_not_a_record():
    record = {"step": 3, "reward": -math.inf, "kl": math.inf, "name": "nan-free", "note": "inf"}
    back = decode_record(encode_record(record))
    assert back["reward"] == -math.inf and back["kl"] == math.inf and back["step"] == 3
    assert back["name"] == "nan-free"
    assert back["note"] == math.inf  # a top-level "inf" string is a number by the contract
    json.loads(encode_record(record))  # strict JSON: no bare NaN / Infinity tokens
    assert decode_record('{"stage": "s') is None and decode_record("[1, 2]") is None


def test_states_are_the_strings_on_disk():
    assert json.dumps({"state": JobState.RUNNING}) == '{"state": "running"}'
    assert "queued" in ACTIVE_STATES and f"{JobState.FAILED}" == "failed"


def test_base_gguf_of_a_lora_gguf():
    assert base_gguf_of("r1-grpo.lora.gguf") == "r1-grpo.base.f16.gguf"


def test_process_helpers_tell_a_live_process_from_a_gone_one(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        ticks = process_start_ticks(proc.pid)
        assert ticks and is_alive(proc.pid, ticks) and not is_alive(proc.pid, ticks + 1)  # a recycled pid is not ours
    finally:
        proc.kill()
        proc.wait()
    assert not is_alive(proc.pid)


def test_log_tail_starts_at_a_line_and_keeps_the_last_lines(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("".join(f"line {i}\n" for i in range(1000)))
    tail = log_tail(log, max_bytes=100)
    assert tail.startswith("line ") and tail.endswith("line 999\n")
    assert log_tail(log, lines=2) == "line 998\nline 999"
    assert log_tail(tmp_path / "missing") == ""


def test_atomic_write_leaves_no_temporary_file(tmp_path):
    write_json_atomic(tmp_path / "a.json", {"x": 1})
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": 1} and os.listdir(tmp_path) == ["a.json"]


def test_writers_of_the_same_file_never_share_a_temporary_file(tmp_path):
    # Before: the temporary name held only the pid (some writers: no pid at all), so two threads (or two processes
    # for the pid-less ones) wrote into one temporary file: the second rename found it gone, or a mix was renamed.
    path, errors = tmp_path / "status.json", []

    def write(n: int) -> None:
        try:
            for i in range(200):
                write_json_atomic(path, {"writer": n, "i": i, "pad": "x" * 2000 * n})
        except OSError as error:
            errors.append(error)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    final = json.loads(path.read_text())
    assert final["i"] == 199 and len(final["pad"]) == 2000 * final["writer"]  # one writer's whole file
    assert os.listdir(tmp_path) == ["status.json"]
    write_text_atomic(path, b"raw bytes\n")
    assert path.read_bytes() == b"raw bytes\n"


def test_non_finite_metrics_read_back_the_same_in_every_reader(tmp_path):
    # Before: the comparison's report read metrics.jsonl with json.loads, kept the string "nan" and failed to
    # average it; the job (RunFolder) and the UI (RunFeed) read a float. Now one reader, one codec.
    folder = RunFolder(tmp_path)
    for step, reward in enumerate([0.5, math.nan, 0.25, 0.75]):
        folder.append(METRICS_FILE, {"stage": "grpo", "step": step, REWARD: reward})
    with open(tmp_path / METRICS_FILE, "a") as f:
        f.write('{"stage": "grpo", "st')  # a line cut by a kill
    rows = read_records(tmp_path / METRICS_FILE)
    assert len(rows) == 4 and math.isnan(rows[1][REWARD]) and math.isnan(folder.read_jsonl(METRICS_FILE)[1][REWARD])
    assert math.isnan(reward_curve(tmp_path)[REWARD][1]) and reward_curve(tmp_path)[REWARD][2] == 0.25
    assert read_records(tmp_path / "missing.jsonl") == []
