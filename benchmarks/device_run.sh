#!/usr/bin/env bash
# One call of the GPU session on the lent machine (see BENCHMARKS.md). From the repo root, carrying .whlpN:
#   bash benchmarks/device_run.sh STEP [STEP...]
# Steps: env, models, qwen, smollm2, scaling, learn (started in the background on GPU 1: it outlives the call),
#        vllm-smoke, vllm, serve, collect. Results go under /tmp/bench (kept while the machine stays warm); each call
# packs the new ones into $OUT/bench_<time>.tgz (no weights) and prints the table of every run so far last.
set -uo pipefail
source benchmarks/device_setup.sh
W=/tmp/bench; mkdir -p $W
B="python3 -m benchmarks.gpu_grpo"
smollm2_dir() { python3 -c "from grpo_playground.models import hf_dir; print(hf_dir('smollm2-135m'))"; }
for step in "$@"; do
  echo "=== $(date +%H:%M:%S) step $step"
  case $step in
    env)
      { nvidia-smi; nvidia-smi topo -m; python3 -c "
import torch, transformers, peft, accelerate, importlib.metadata as md
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())
for p in ('transformers','trl','peft','accelerate','datasets','bitsandbytes','unsloth','unsloth_zoo','vllm'):
    try: print(p, md.version(p))
    except Exception as e: print(p, 'missing')
x = torch.empty(2**31, dtype=torch.uint8, device='cuda'); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
s, e = torch.cuda.Event(True), torch.cuda.Event(True); s.record()
for _ in range(20): y.copy_(x)
e.record(); torch.cuda.synchronize(); print('d2d copy TB/s (read+write):', round(2 * 20 * x.numel() / (s.elapsed_time(e) / 1e3) / 1e12, 2))
"; } > $W/env.txt 2>&1; cat $W/env.txt | grep -v "^|" | tail -16 ;;
    models) $B models --out $W/models ;;
    qwen) timeout 490 $B suite qwen --models $W/models --out $W/qwen --timeout 200 --deadline ${QWEN_S:-450} | tail -3 ;;
    smollm2) smollm2_dir; timeout 330 $B suite smollm2 --gpus 0 --out $W/smollm2 --timeout 150 --deadline 300 | tail -2 ;;
    scaling) timeout 330 $B suite scaling --gpus 0,1 --out $W/scaling --timeout 160 --deadline 300 | tail -2 ;;
    learn)
      CUDA_VISIBLE_DEVICES=1 setsid nohup python3 -m pipelines.experiments.tiny_cpu_learning \
        --recipe benchmarks/recipes/smollm2_gpu_learning.yaml --work $W/learn --n-eval 600 --grpo-minutes 3 \
        --preflight-prompts 8 --out $W/learn/smollm2_gpu_learning > $W/learn.log 2>&1 < /dev/null &
      sleep 2; tail -3 $W/learn.log ;;
    vllm-smoke)
      timeout 150 python3 - <<'PY' 2>&1 | tee $W/vllm_smoke.txt | tail -12
import os, time, subprocess
d = subprocess.run(["python3", "-c", "from grpo_playground.models import hf_dir; print(hf_dir('smollm2-135m'))"], capture_output=True, text=True).stdout.strip()
from vllm import LLM, SamplingParams
llm = LLM(model=d, gpu_memory_utilization=0.25, max_model_len=1024, dtype="bfloat16", seed=0)
prompts = [f"Question {i}: what is {i} plus {2*i}? Think step by step." for i in range(64)]
sp = SamplingParams(max_tokens=128, temperature=0.9, ignore_eos=True)
llm.generate(prompts[:8], sp)
t = time.perf_counter(); out = llm.generate(prompts, sp); dt = time.perf_counter() - t
n = sum(len(o.outputs[0].token_ids) for o in out)
print(f"VLLM_SMOKE ok: {n} tokens in {dt:.2f} s = {n/dt:.0f} tok/s (64 x 128, SmolLM2-135M bf16)")
PY
      ;;
    vllm) grep -q "VLLM_SMOKE ok" $W/vllm_smoke.txt || { echo "vLLM smoke failed: no vLLM runs"; continue; }
      timeout 400 $B suite vllm --gpus ${VLLM_GPUS:-0,1} --models $W/models --out $W/vllm --timeout 200 --deadline ${VLLM_S:-300} | tail -2 ;;
    serve)
      grep -q "VLLM_SMOKE ok" $W/vllm_smoke.txt || { echo "vLLM smoke failed: no serving proof"; continue; }
      a=$(ls -d $W/smollm2/runs/smollm2-135m_trl_L128*/grpo 2>/dev/null | head -1)
      t=$(ls -d $W/learn/grpo/grpo 2>/dev/null | head -1)
      timeout 200 python3 -m benchmarks.vllm_chat_proof --base "$(smollm2_dir)" ${a:+--lora plain=$a} \
        ${t:+--hot-load tagged=$t} --out $W/vllm_chat_proof.json | tail -30 ;;
    collect) tail -5 $W/learn.log; ls $W/learn ;;
  esac
done
# pack everything small (no weights, no checkpoints) and show every run so far
tar czf $OUT/bench_$(date +%H%M%S).tgz -C $W --exclude='*.safetensors' --exclude='*.bin' --exclude='*.pt' \
  --exclude='*.pth' --exclude=checkpoints --exclude=models --exclude='*.gguf' --exclude=tokenizer.json --exclude=vocab.json \
  --exclude=merges.txt . 2>/dev/null
$B table $W > $W/table.md 2>/dev/null; cat $W/table.md
