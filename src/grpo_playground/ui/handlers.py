"""One shape for every tab's handler: a request dataclass in, a response dataclass out, a user's mistake shown as one.

    @dataclass
    class StopRequest:
        run_id: str
        token: str = ""

    @handler(StopRequest)
    def stop(req: StopRequest) -> Requested: ...  # a dataclass of (message, message_for)

    button.click(stop, [run_pick, token], [message, message_for])

Gradio calls an event's function by position with its input components' values, publishes the function's signature
as the API's parameters, and injects gr.Request / gr.EventData by annotation and gr.Progress by default value
(gradio.helpers.special_args). So the decorated function's signature is the request's fields, in order:
- a field per input component, in the order the tab wires them, named as gradio_client callers pass them;
- a field annotated gr.Request or gr.SelectData (or defaulting to gr.Progress()) is filled by Gradio, not a component;
- a field declared `inputs(names)` takes one component per name and holds them as {name: value} (the sandbox's
  weight boxes, one per reward); a last field declared `rest()` takes the remaining ones as a list (a generated form);
- a field annotated `str` or `list[str]` is checked: a null sent for it gets its default where it has one, a value of
  another kind is refused with the field's name (the API passes values as sent; the page's boxes cannot send them).
  Other fields (`str | None`, numbers) come as sent: the handler checks them.
The decorated function still takes those values by position or keyword, as Gradio does.

A response dataclass is sent as its fields' values in order, one output component each (a field declared `spread()`
holds a list of values, one component each); a response of one value is sent as that value. Anything else (an API
endpoint's JSON answer, a {component: value} dict) is sent as returned. A generator handler streams: each response
it yields is sent the same way, and a cancelled event closes it.

The errors of USER_ERRORS (or the kinds given) raised inside become gr.Error (ui/user_errors.py).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing

from grpo_playground.ui.user_errors import USER_ERRORS, as_user_error, user_error

_INPUTS, _LIKE, _REST, _SPREAD = "handler_inputs", "handler_like", "handler_rest", "handler_spread"
EMPTY = inspect.Parameter.empty
# what a script may send for an annotated field (a null reached int(None) before this was checked)
KINDS = {str: (lambda v: isinstance(v, str), "text"),
         list[str]: (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of texts")}


def inputs(names, like: type | None = None, **kwargs) -> dataclasses.Field:
    """A request field filled by one component per name (in that order): {name: value}, or {key: value} when
    `names` maps each parameter name to its key. `like`: a dataclass whose fields of those names give each
    parameter its type and default (an API's optional parameters)."""
    keys = dict(names) if isinstance(names, dict) else {name: name for name in names}
    return dataclasses.field(metadata={_INPUTS: keys, _LIKE: like}, **kwargs)


def rest(**kwargs) -> dataclasses.Field:
    """A request's last field: the remaining inputs as a list (a generated form's boxes, in the order it built them)."""
    return dataclasses.field(metadata={_REST: True}, **kwargs)


def spread(**kwargs) -> dataclasses.Field:
    """A response field holding a list of values, one output component each."""
    return dataclasses.field(metadata={_SPREAD: True}, **kwargs)


def _parameters(request_type: type) -> list[inspect.Parameter]:
    """The request's fields as the positional parameters Gradio fills (a field of `inputs` gives one per name)."""
    hints = typing.get_type_hints(request_type)
    parameters = []
    for field in dataclasses.fields(request_type):
        if field.metadata.get(_REST):
            parameters.append(inspect.Parameter(field.name, inspect.Parameter.VAR_POSITIONAL))
            continue
        if _INPUTS not in field.metadata:
            default = EMPTY if field.default is dataclasses.MISSING else field.default
            parameters.append(inspect.Parameter(field.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default,
                                                annotation=hints[field.name]))
            continue
        like = field.metadata[_LIKE]
        types = typing.get_type_hints(like) if like else {}
        defaults = {f.name: f.default for f in dataclasses.fields(like)} if like else {}
        parameters += [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                         default=defaults.get(name, EMPTY), annotation=types.get(name, EMPTY))
                       for name in field.metadata[_INPUTS]]
    return parameters


def build_request(request_type: type, signature: inspect.Signature, args: tuple, kwargs: dict):
    """The request from Gradio's positional values (or a caller's keywords); a null for an optional value gets its
    default; a value of the wrong kind raises the user's error naming the field."""
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    values = {}
    for name, value in bound.arguments.items():
        parameter = signature.parameters[name]
        accepts, kind = KINDS.get(parameter.annotation, (None, None))
        if accepts and value is None and parameter.default is not EMPTY:
            value = parameter.default  # a null for an optional text: its default
        elif accepts and not accepts(value):
            raise user_error(ValueError(f"{name} must be {kind}, not {type(value).__name__}"))
        values[name] = list(value) if parameter.kind == inspect.Parameter.VAR_POSITIONAL else value
    fields = {}
    for field in dataclasses.fields(request_type):
        keys = field.metadata.get(_INPUTS)
        fields[field.name] = {key: values[name] for name, key in keys.items()} if keys else values[field.name]
    return request_type(**fields)


def updates(answer):
    """What Gradio expects for a handler's answer: a response dataclass as its fields' values (a lone one bare)."""
    if not dataclasses.is_dataclass(answer) or isinstance(answer, type):
        return answer
    values = []
    for field in dataclasses.fields(answer):
        value = getattr(answer, field.name)
        values += list(value) if field.metadata.get(_SPREAD) else [value]
    return values[0] if len(values) == 1 else tuple(values)


def handler(request_type: type | None, errors: tuple[type[Exception], ...] | type[Exception] = USER_ERRORS):
    """Decorate `fn(request) -> response` as a Gradio event or API function taking the request's fields
    (`request_type` None: `fn() -> response`, an event of no inputs)."""
    parameters = _parameters(request_type) if request_type is not None else []
    signature = inspect.Signature(parameters)
    annotations = {p.name: p.annotation for p in parameters if p.annotation is not EMPTY}

    def request(args: tuple, kwargs: dict) -> tuple:
        """fn's arguments: the request, or none for a handler of no inputs."""
        if request_type is None:
            signature.bind(*args, **kwargs)  # no inputs: none may come
            return ()
        return (build_request(request_type, signature, args, kwargs),)

    def decorate(fn):
        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def event(*args, **kwargs):
                with as_user_error(errors):
                    stream = fn(*request(args, kwargs))
                    try:
                        for answer in stream:
                            yield updates(answer)
                    finally:  # a cancelled event (Clear, a closed page) closes the handler's stream too
                        stream.close()
        else:
            @functools.wraps(fn)
            def event(*args, **kwargs):
                with as_user_error(errors):
                    return updates(fn(*request(args, kwargs)))

        # what gradio publishes and fills, not the wrapped fn(request); gr.api reads the answer's type from it
        event.__signature__ = signature.replace(return_annotation=inspect.signature(fn).return_annotation)
        event.__annotations__ = annotations  # resolved: gradio's special_args compares them with gr.Request
        return event
    return decorate
