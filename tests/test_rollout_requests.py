"""One vLLM request per GRPO group (training.rollouts.one_request_per_group), against an engine that samples as vLLM's
LLM.generate does: one RequestOutput per prompt, holding `n` completions in index order (vLLM cannot run here; the GPU
rows are in BENCHMARKS.md)."""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field

from grpo_playground.training.rollouts import one_request_per_group


@dataclass
class Params:  # the fields of vllm.SamplingParams the grouping reads or sets
    n: int = 1
    temperature: float = 1.0
    max_tokens: int = 4


@dataclass
class Completion:
    index: int
    token_ids: list[int]


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[Completion] = field(default_factory=list)


class Engine:
    """Samples a fresh token sequence per completion; records what each call asked for."""

    def __init__(self):
        self.calls: list[tuple[list, list]] = []
        self.counter = itertools.count(1000)

    def generate(self, prompts, sampling_params=None, use_tqdm=True, lora_request=None):
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        self.calls.append((copy.deepcopy(prompts), [p.n for p in params]))
        return [RequestOutput(p["prompt_token_ids"], [Completion(i, [next(self.counter)] * q.max_tokens)
                                                      for i in range(q.n)])
                for p, q in zip(prompts, params, strict=True)]


def rows(prompts_ids, repeat):
    return [{"prompt_token_ids": ids} for ids in prompts_ids for _ in range(repeat)]


def test_each_group_is_one_request_and_trl_still_reads_one_output_per_row():
    engine = Engine()
    one_request_per_group(engine)
    prompts = rows([[1, 2], [3], [4, 5, 6]], repeat=4)
    outputs = engine.generate(prompts, sampling_params=Params(), use_tqdm=False)
    assert engine.calls == [([{"prompt_token_ids": [1, 2]}, {"prompt_token_ids": [3]},
                              {"prompt_token_ids": [4, 5, 6]}], [4, 4, 4])]
    # what TRL's colocated path reads: prompt ids per row, then each row's completions, flattened in row order
    assert [o.prompt_token_ids for o in outputs] == [p["prompt_token_ids"] for p in prompts]
    assert all(len(o.outputs) == 1 for o in outputs)
    completions = [c.token_ids for o in outputs for c in o.outputs]
    assert len({tuple(c) for c in completions}) == 12  # twelve distinct samples, none repeated
    assert [o.outputs[0].index for o in outputs] == [0, 1, 2, 3] * 3


def test_uneven_runs_and_kwargs_pass_through():
    engine = Engine()
    one_request_per_group(engine)
    prompts = rows([[7]], 3) + rows([[8]], 1) + rows([[7]], 2)  # the same prompt again later: its own request
    outputs = engine.generate(prompts, Params(), use_tqdm=False, lora_request="adapter")
    assert engine.calls[0][1] == [3, 1, 2]
    assert [o.prompt_token_ids for o in outputs] == [[7]] * 3 + [[8]] + [[7]] * 2


def test_greedy_distinct_prompts_and_multimodal_go_as_given():
    engine = Engine()
    one_request_per_group(engine)
    greedy = rows([[1]], 4)
    assert len(engine.generate(greedy, Params(temperature=0.0))) == 4  # vLLM refuses n > 1 when greedy
    distinct = rows([[1], [2], [3]], 1)
    engine.generate(distinct, Params())
    images = [{"prompt_token_ids": [1], "multi_modal_data": {"image": "img"}}] * 2
    engine.generate(images, Params())
    assert [n for _, n in engine.calls] == [[1] * 4, [1] * 3, [1] * 2]
