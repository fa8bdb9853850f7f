"""Pre-flight before GRPO: will the rewards see a signal from THIS model, with THIS template and these tags?

The seed's author found out after 50 flat steps that the model never wrote `<SOLUTION>`. This check answers
before any GRPO step: how each tag tokenizes, what the rendered prompt looks like, and a few sampled groups
(held-out prompts x num_generations, sampled as GRPO will sample them) scored by the enabled rewards. When no
group has reward variance, or no completion is in the format, the verdict says why and what to do.
Written to <run>/preflight.json and the log.
"""

from __future__ import annotations

from grpo_playground.config import RunConfig
from grpo_playground.training.backend import Policy
from grpo_playground.contracts.layout import PREFLIGHT_FILE
from grpo_playground.training.run_folder import RunFolder


# completions per generate call: the usual 4-8 prompts x 8 of a small model in one call; long completions get fewer
# rows (16,384 completion tokens a call), so a large model's KV cache in HF generate stays near one group's
PREFLIGHT_MAX_ROWS, PREFLIGHT_MAX_TOKENS = 64, 16384


def sample_groups(policy: Policy, prompts: list[str], cfg: RunConfig) -> list[list[str]]:
    """num_generations completions per prompt, sampled with GRPO's temperature and length, decoded as TRL does.
    The prompts go left-padded, several to a generate call (PREFLIGHT_MAX_ROWS, PREFLIGHT_MAX_TOKENS): one call
    per prompt made the pre-flight of 8 prompts take 114 s on an H200 (a small model's decoding step is
    launch-bound, whatever the batch). Unsloth with vLLM rollouts samples through its engine instead."""
    import torch

    if policy.backend == "unsloth" and policy.rollouts == "vllm":  # its fast_inference engine, loaded with the model
        return _sample_groups_with_vllm(policy, prompts, cfg)
    tok, model, n = policy.tokenizer, policy.model, cfg.grpo.num_generations
    per_call = max(1, min(PREFLIGHT_MAX_ROWS, PREFLIGHT_MAX_TOKENS // cfg.grpo.max_completion_length) // n)
    side = tok.padding_side  # the policy's loaders always set a pad token (eos where the model has none)
    tok.padding_side = "left"  # generation continues each prompt's last token
    groups = []
    model.eval()
    try:
        for start in range(0, len(prompts), per_call):
            inputs = tok(prompts[start:start + per_call], return_tensors="pt", padding=True,
                         add_special_tokens=False).to(policy.device)
            with torch.no_grad():
                out = model.generate(**inputs, do_sample=True, temperature=cfg.grpo.temperature, top_p=cfg.grpo.top_p,
                                     max_new_tokens=cfg.grpo.max_completion_length, num_return_sequences=n,
                                     pad_token_id=tok.pad_token_id)
            texts = tok.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
            groups += [texts[i:i + n] for i in range(0, len(texts), n)]  # generate keeps each prompt's n together
    finally:
        tok.padding_side = side
        model.train()
    return groups


def _sample_groups_with_vllm(policy: Policy, prompts: list[str], cfg: RunConfig) -> list[list[str]]:
    """Unsloth's fast_inference: the GRPO rollouts' own vLLM engine samples the groups, with the stage's adapter as
    each rollout hands it over (`load_lora` of the live LoRA weights). HF generate on the same weights took 4 min 20 s
    for one group of 8 x 1,024 tokens of the 8B in FP8, longer than ten GRPO steps
    (results/gpu/h100_recipes35_lease7/)."""
    from vllm import SamplingParams

    params = SamplingParams(n=cfg.grpo.num_generations, temperature=cfg.grpo.temperature, top_p=cfg.grpo.top_p,
                            max_tokens=cfg.grpo.max_completion_length)
    # the engine's own generate: Unsloth wraps it when it folds the adapter into the weights for rollouts
    outputs = policy.model.vllm_engine.generate(prompts, sampling_params=params, use_tqdm=False,
                                                lora_request=policy.model.load_lora("preflight", load_tensors=True))
    return [[c.text for c in out.outputs] for out in outputs]


def verdict(n_groups: int, zero_variance: int, format_rate: float, sft_done: bool) -> tuple[str, str, str]:
    """(level, why, what to do): level is ok | warning | error."""
    if format_rate == 0:
        why = ("no sampled completion is in the format (strict match of the solution tags): every answer reward "
               "gives its no-match score, every group scores alike, advantage 0, no gradient -- the seed's flat -2.0")
        todo = ("run SFT first (it teaches the format)" if not sft_done else
                "check the tags and the chat template below (prefill, tag tokens); sample the SFT model in the "
                "Reward sandbox; train SFT longer")
        return "error", why, todo
    if zero_variance == n_groups:
        return "error", ("every sampled group has zero reward variance: all completions of a prompt score alike, so "
                         "GRPO has no advantage to learn from"), \
            "raise grpo.temperature (1.0-1.2) or num_generations; mix easier/harder problems (levels in the source spec)"
    if format_rate < 0.5 or zero_variance > n_groups / 2:
        return "warning", (f"only {format_rate:.0%} of completions are in the format and {zero_variance}/{n_groups} "
                           "groups have zero variance: the signal is weak"), \
            "consider more SFT first, or a higher temperature"
    return "ok", f"{format_rate:.0%} of completions in the format, {n_groups - zero_variance}/{n_groups} groups with " \
        "reward variance: GRPO has a signal", ""


def run_preflight(cfg: RunConfig, policy: Policy, folder: RunFolder, sft_done: bool) -> dict:
    from grpo_playground.data import load_examples
    from grpo_playground.data.chat_template import render_prompt, template_report
    from grpo_playground.data.tag_tokens import tag_token_report
    from grpo_playground.rewards import one_group_scale, score_group

    tags = cfg.rewards.tags
    examples = load_examples(cfg.data.eval_source, n=cfg.grpo.preflight_prompts, tags=tags, seed=cfg.data.seed).examples
    tag_tokens = [t.to_dict() for t in tag_token_report(policy.tokenizer, tags)]
    template = template_report(policy.tokenizer, examples[0], tags, cfg.data.prefill_reasoning).to_dict()
    prompts = [render_prompt(policy.tokenizer, e["prompt"], tags, cfg.data.prefill_reasoning) for e in examples]
    scale = one_group_scale(cfg.grpo.scale_rewards)
    groups = []
    for example, completions in zip(examples, sample_groups(policy, prompts, cfg)):
        score = score_group(completions, example["answer"], cfg.rewards.weights, tags, scale,
                            shaping=cfg.rewards.shaping(cfg.grpo.max_completion_length))
        groups.append({
            "problem": example["problem"], "answer": example["answer"], "completions": completions,
            "rewards": {n: [c.scores[n] for c in score.completions] for n in score.names},
            "total": score.totals, "advantages": score.advantages, "std": score.std,
            "zero_variance": score.zero_variance, "zero_variance_reason": score.zero_variance_reason,
            "in_format": [c.strict_answer is not None for c in score.completions],
        })
    n_completions = sum(len(g["completions"]) for g in groups)
    format_rate = sum(sum(g["in_format"]) for g in groups) / max(n_completions, 1)
    zero_variance = sum(g["zero_variance"] for g in groups)
    level, why, todo = verdict(len(groups), zero_variance, format_rate, sft_done)
    report = {"level": level, "why": why, "what_to_do": todo, "format_rate": format_rate,
              "zero_variance_groups": zero_variance, "groups_sampled": len(groups), "sft_done": sft_done,
              "tag_tokens": tag_tokens, "template": template, "groups": groups}
    folder.write_json(PREFLIGHT_FILE, report)
    folder.log("pre-flight: tags tokenize as " + "; ".join(f"{t['tag']} -> {t['n_tokens']} token(s)" for t in tag_tokens))
    folder.log(f"pre-flight: rendered prompt ends with {template['assistant_prefix']!r}")
    folder.log(f"pre-flight [{level}]: {why}" + (f". What to do: {todo}" if todo else ""))
    return report
