"""The product's GRPOTrainer (training.grpo_trainer) against TRL 1.14.2's own path, on a tiny Qwen3 on CPU.

vLLM cannot run here: the rollout is a fixed batch of completions with made-up sampling log-probs, handed to the
trainer where vLLM's would arrive (`_generate_single_turn`), and `use_vllm` is set so TRL takes its vLLM branch
(the importance-sampling correction against those log-probs).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from benchmarks.logprob_memory import tiny_model, tiny_trainer  # noqa: E402
from grpo_playground.models.shapes import QWEN3_COMMON  # noqa: E402

PROMPTS = ["What is 2 plus 3?", "Name a prime number."]
BATCH = [{"prompt": p} for p in PROMPTS for _ in range(2)]  # two groups of two, as TRL's sampler repeats them
COMPLETION = 6


def _model():
    return tiny_model()


def _trainer(model, tmp_path, beta=0.04, **options):
    trainer = tiny_trainer(model, str(tmp_path), PROMPTS, len(BATCH), COMPLETION, beta=beta, **options)

    def vllm_rollout(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        generator = torch.Generator().manual_seed(1)  # the same completions at every call
        rows = len(prompt_ids)  # TRL's sampler already repeats each prompt num_generations times
        ids = torch.randint(100, 5000, (rows, COMPLETION), generator=generator).tolist()
        logps = (-2.0 - torch.rand(rows, COMPLETION, generator=generator)).tolist()
        return ids, logps

    trainer.use_vllm = True  # TRL's vLLM branch: the importance-sampling correction against the rollout's log-probs
    trainer._generate_single_turn = vllm_rollout
    return trainer


def _count_forwards(model) -> list:
    calls = []
    model.get_base_model().model.register_forward_hook(lambda *a: calls.append(torch.is_grad_enabled()))
    return calls


def _loss_and_grads(trainer, compute_loss, inputs):
    model = trainer.model
    model.zero_grad()
    loss = compute_loss(model, inputs)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def _close(a: dict, b: dict, **tol):
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], msg=name, **tol)


SAMPLING_METRICS = ("sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max",
                    "sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/mean",
                    "sampling/importance_sampling_ratio/max")


# every importance-sampling mode TRL 1.14.2 has, each with and without a lower bound (the made-up sampling log-probs
# put the token ratios around 1e-4, so a 1e-4 bound masks or truncates some of them and not others)
@pytest.mark.parametrize("mode", ["sequence_mask", "sequence_truncate", "token_mask", "token_truncate"])
@pytest.mark.parametrize("clip_min", [None, 1e-4])
def test_old_policy_forward_is_skipped_with_vllm_on_policy_and_the_loss_is_unchanged(tmp_path, mode, clip_min):
    from trl import GRPOTrainer

    model = _model()
    trainer = _trainer(model, tmp_path, logprobs="full")
    trainer.vllm_importance_sampling_mode, trainer.vllm_importance_sampling_clip_min = mode, clip_min
    forwards = _count_forwards(model)
    assert trainer.old_logps_redundant()

    old = GRPOTrainer._generate_and_score_completions(trainer, list(BATCH))  # TRL's: old + reference forwards
    metrics = trainer._metrics["train"]
    trl_metrics = {name: metrics[name][-1] for name in SAMPLING_METRICS}
    assert forwards == [False, False]
    forwards.clear()
    new = trainer._prepare_inputs(list(BATCH))  # as training takes it: generated, shuffled, split per micro-step
    assert forwards == [False]  # the reference forward only
    assert "old_per_token_logps" in old and "old_per_token_logps" not in new
    assert "importance_sampling_ratio" not in new
    order = [old["completion_ids"].tolist().index(row) for row in new["completion_ids"].tolist()]  # the shuffle
    assert sorted(order) == list(range(len(BATCH)))

    loss_old, grads_old = _loss_and_grads(trainer, lambda m, i: GRPOTrainer._compute_loss(trainer, m, i), old)
    loss_new, grads_new = _loss_and_grads(trainer, trainer._compute_loss, new)
    torch.testing.assert_close(new["importance_sampling_ratio"], old["importance_sampling_ratio"][order])
    torch.testing.assert_close(loss_new, loss_old)
    _close(grads_new, grads_old)
    for name in SAMPLING_METRICS:  # logged by the loss's forward now, as TRL logs them at generation
        assert metrics[name][-1] == pytest.approx(trl_metrics[name], rel=1e-5, abs=1e-12), name


def test_reference_forward_is_skipped_when_beta_is_zero(tmp_path):
    model = _model()
    trainer = _trainer(model, tmp_path, beta=0.0, logprobs="full")
    forwards = _count_forwards(model)
    inputs = trainer._generate_and_score_completions(list(BATCH))
    assert forwards == [] and "ref_per_token_logps" not in inputs  # TRL's own skip: neither no-grad forward runs
    trainer._compute_loss(model, inputs).backward()
    assert forwards == [True]


def test_old_policy_forward_runs_when_off_policy(tmp_path):
    model = _model()
    trainer = _trainer(model, tmp_path, logprobs="full")
    trainer.num_iterations = 2  # the batch is reused for a second update: the old policy differs
    assert not trainer.old_logps_redundant()
    forwards = _count_forwards(model)
    inputs = trainer._generate_and_score_completions(list(BATCH))
    assert len(forwards) == 2 and "old_per_token_logps" in inputs


def test_chunked_logprobs_equal_the_full_path_with_their_gradients(tmp_path):
    model = _model()
    trainer = _trainer(model, tmp_path, logprobs="chunked")
    assert trainer.chunked_logprobs
    inputs = trainer._generate_and_score_completions(list(BATCH))
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    weights = torch.randn(ids.shape[0], COMPLETION, generator=torch.Generator().manual_seed(3))

    def logps_and_grads(chunked):
        trainer.chunked_logprobs = chunked
        model.zero_grad()
        logps, entropy, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, COMPLETION, compute_entropy=True)
        (logps * weights).sum().backward()
        return logps.detach(), entropy.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    head_calls = []  # the full path runs the LM head over every position; the chunked one reads its weight in chunks
    model.get_output_embeddings().register_forward_hook(lambda m, i, o: head_calls.append(tuple(o.shape)))
    logps_full, entropy_full, grads_full = logps_and_grads(False)
    assert head_calls and head_calls[0][-1] == 151936
    head_calls.clear()
    logps_chunked, entropy_chunked, grads_chunked = logps_and_grads(True)
    assert head_calls == []
    torch.testing.assert_close(logps_chunked, logps_full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy_chunked, entropy_full, atol=1e-5, rtol=1e-5)
    _close(grads_chunked, grads_full, atol=1e-5, rtol=1e-4)

    trainer.chunked_logprobs = False
    loss_full, grads_full = _loss_and_grads(trainer, trainer._compute_loss, dict(inputs))
    trainer.chunked_logprobs = True
    loss_chunked, grads_chunked = _loss_and_grads(trainer, trainer._compute_loss, dict(inputs))
    torch.testing.assert_close(loss_chunked, loss_full, atol=1e-6, rtol=1e-5)
    _close(grads_chunked, grads_full, atol=1e-5, rtol=1e-4)


def test_chunked_scoring_runs_the_backbone_a_micro_batch_at_a_time(tmp_path):
    """TRL's scoring passes (old-policy and reference log-probs) hand the chunked path the whole generation batch with
    batch_size = the micro-batch; TRL's chunked path drops it, so the backbone's activations over every row set the
    step's peak whatever the micro-batch (issue 35's H100 lease). The product's runs the rows batch_size at a time,
    with the same log-probs."""
    model = _model()
    trainer = _trainer(model, tmp_path, logprobs="chunked")
    inputs = trainer._generate_and_score_completions(list(BATCH))
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    rows_seen = []
    model.get_base_model().model.register_forward_hook(lambda m, args, kw, out: rows_seen.append(kw["input_ids"].shape[0]),
                                                       with_kwargs=True)
    with torch.no_grad():
        whole, whole_entropy, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, COMPLETION,
                                                                            compute_entropy=True)
        assert rows_seen == [len(BATCH)]
        rows_seen.clear()
        split, split_entropy, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, COMPLETION, batch_size=1,
                                                                            compute_entropy=True)
    assert rows_seen == [1] * len(BATCH)
    torch.testing.assert_close(split, whole, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(split_entropy, whole_entropy, atol=1e-5, rtol=1e-5)


def test_a_wrapped_output_head_keeps_the_full_path(tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = dict(QWEN3_COMMON, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_window_layers=1, tie_word_embeddings=False)
    model = get_peft_model(Qwen3ForCausalLM(Qwen3Config(**config)), LoraConfig(r=2, target_modules=["q_proj", "lm_head"]))
    assert not _trainer(model, tmp_path, logprobs="chunked").chunked_logprobs


@pytest.mark.parametrize("sync", ["deltas", "lora"])
def test_a_sync_choice_without_vllm_builds_the_trainer_as_before(tmp_path, sync):
    trainer = _trainer(_model(), tmp_path, weight_sync=sync)
    assert getattr(trainer, "vllm_generation", None) is None  # HF generate: nothing to sync


def test_training_steps_run_with_the_skip_and_log_the_sampling_metrics(tmp_path):
    trainer = _trainer(_model(), tmp_path)
    trainer.args.max_steps = 2
    trainer.train()
    logged = [row for row in trainer.state.log_history if "sampling/importance_sampling_ratio/mean" in row]
    assert len(logged) == 2 and all(row["loss"] == row["loss"] for row in logged)  # not NaN
