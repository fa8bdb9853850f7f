"""ui.handlers: a request dataclass built from what Gradio passes, a response dataclass sent as the outputs.

Gradio is driven the way it calls an event (gradio.helpers.special_args fills gr.Request and gr.SelectData by
annotation; check_function_inputs_match counts the parameters), so a signature Gradio cannot fill fails here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import gradio as gr
import pytest
from gradio.helpers import special_args
from gradio.utils import check_function_inputs_match

from grpo_playground.ui.handlers import handler, inputs, rest, spread


@dataclass
class Request:
    name: str  # checked: text only
    count: int | None
    weights: dict = inputs({"weight_a": "a", "weight_b": "b"})
    token: str = ""
    request: gr.Request | None = None


@dataclass
class Answer:
    panes: list = spread()
    note: object = field(default_factory=gr.skip)


@handler(Request)
def echo(req: Request) -> Answer:
    if req.count is not None and req.count < 0:
        raise ValueError(f"count {req.count}: give 0 or more")
    if req.count == 99:
        raise KeyError("a bug, not the user's mistake")
    return Answer([req.name, req.weights, req.token], getattr(req.request, "username", None))


def test_gradio_fills_the_request_and_the_outputs_come_in_field_order():
    """The components' values by position, the visitor's gr.Request injected where the field says; the answer's
    spread field is one output per value."""
    assert check_function_inputs_match(echo, [None] * 5, False) is None  # 5 components: no warning
    args, _, _, _ = special_args(echo, ["q", 2, 0.5, 1.5, "t"], request=SimpleNamespace(username="ada"))
    assert echo(*args) == ("q", {"a": 0.5, "b": 1.5}, "t", "ada")


def test_a_null_text_gets_its_default_and_a_wrong_kind_is_named():
    assert echo("q", None, 1, 1, None)[2] == ""  # the API sent null for the token
    with pytest.raises(gr.Error, match="name must be text, not int"):
        echo(7, None, 1, 1)


def test_the_users_mistakes_are_gr_errors_and_bugs_are_not():
    with pytest.raises(gr.Error, match="count -1: give 0 or more"):
        echo("q", -1, 1, 1)
    with pytest.raises(KeyError):
        echo("q", 99, 1, 1)


@dataclass
class Pick:
    table: list
    evt: gr.SelectData


@handler(Pick)
def picked(req: Pick) -> str:
    return req.table[req.evt.index[0]]


def test_an_event_s_data_is_injected_by_annotation():
    data = gr.EventData(None, {"index": [1, 0], "value": "b"})
    args, _, event_index, _ = special_args(picked, [["a", "b"]], event_data=data)
    assert event_index == 1 and picked(*args) == "b"  # a lone output: the value itself


@dataclass
class Form:
    stage: str
    values: list = rest()


@handler(Form)
def form(req: Form) -> tuple:
    return req.stage, req.values


def test_a_generated_form_comes_as_a_list():
    assert check_function_inputs_match(form, [None] * 4, False) is None
    assert form("sft", 1, "x", True) == ("sft", [1, "x", True])


def test_a_streamed_event_sends_each_answer_and_closing_it_ends_the_handler():
    """Each yielded answer goes out as the outputs; a cancelled chat (Clear, a closed page) ends the handler's stream,
    whose finally stops the servers' work."""
    closed = []

    @handler(Form)
    def stream(req: Form):
        try:
            for value in req.values:
                yield Answer([value])
        finally:
            closed.append(True)

    events = stream("s", "a", "b")
    assert next(events) == ("a", gr.skip())
    events.close()
    assert closed == [True]
