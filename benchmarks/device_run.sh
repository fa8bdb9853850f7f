#!/usr/bin/env bash
# One call of the GPU session on the lent machine (see BENCHMARKS.md). From the repo root, carrying .whlpN:
#   bash benchmarks/device_run.sh STEP [STEP...]
# Steps: env; speed-base and speed (the GPU speed issue's suites, started in the background with setsid: they outlive
# the call and run one after the other); vllm-smoke; wait-speed (follows the speed suite until done or WAIT_S);
# serve and eval-speed (the vLLM chat proof and eval timing); share-job-chat and share-chat-job (a chat server and
# a training job on one GPU); report; seed-sft and seed-regime (issue 13's
# experiment, in the background) and wait-seed (follows it until done or WAIT_S); shapes (the random-weight Qwen3
# shapes, in the background); grpo-speed (issue 24's small rows and the plain vllm.LLM.generate of their batches), grpo-speed-8b (its Qwen3-8B rows, after grpo-speed), grpo-budget (issue 35's 22 GiB rows), grpo-recipes (its shipped Qwen3 recipes, SFT and GRPO), wait-grpo-speed
# (follows both until done or WAIT_S) and report-speed (their results/gpu/grpo_step.json into $OUT); gsm8k-data,
# gsm8k-sft, gsm8k-lease1, gsm8k-bring-back(-grpo), gsm8k-restore, gsm8k-lease2 and wait-gsm8k (issue 20, two leases;
# BENCHMARKS.md); space-e2e (the app itself through its
# API, benchmarks/space_e2e.py, in the background) and wait-e2e (follows it until done or WAIT_S). Results go under /tmp/bench (kept while the
# machine stays warm); each call packs every log and result so far (no weights) into $OUT/bench_<time>.tgz and prints
# the table of every run last.
set -uo pipefail
source benchmarks/device_setup.sh
W=/tmp/bench; mkdir -p $W
B="python3 -m benchmarks.gpu_grpo"
SPEED_DIR=$W/grpo_speed; mkdir -p $SPEED_DIR  # issue 24's runs
ROLL="python3 -m benchmarks.vllm_rollout"
WAIT_VLLM="while [ ! -f /tmp/dev/done.vllm ]; do sleep 5; done"  # its last bundle part unpacked (device_setup.sh)
WAIT_SHAPES="while [ -f $W/shapes.log ] && [ ! -f $W/shapes.done ]; do sleep 2; done"  # the shapes step, if started
SEED="python3 -m grpo_playground.experiments.seed_regime --recipe benchmarks/recipes/smollm2_seed_regime_gpu.yaml \
  --worked 'generator:train?levels=1-2' --answers 'generator:train?levels=1-2' --eval-data 'generator:test?levels=1-2' \
  --minutes ${SEED_MINUTES:-4} --max-rounds 5 --work $W/seed --out $W/learning_seed_regime_gpu"
# issue 20: the seed regime on real data, split over two leases (BENCHMARKS.md, "GSM8K seed regime: how to run it").
# GSM8K travels in the ignored .carry/gsm8k (never in the repo); lease 1 brings sft-W's adapter back in $OUT, lease 2
# carries it in .carry/lease1 and every arm starts from it, its hash checked.
GSM8K_DIR=$W/seed_gsm8k
PILOTS=${PILOTS:-"--pilot recipe --pilot lr4e-5:grpo.learning_rate=4e-5 \
  --pilot g4x32:grpo.num_generations=4,grpo.per_device_train_batch_size=128"}
SEEDG="python3 -m grpo_playground.experiments.seed_regime --recipe benchmarks/recipes/smollm2_seed_regime_gpu.yaml \
  --worked 'generator:train?levels=1-2' --answers gsm8k:$W/gsm8k/train.jsonl --n-answers 7000 --n-pilot 300 \
  --eval-data gsm8k:$W/gsm8k/test.jsonl --n-eval 1319 --eval-data-2 'generator:test?levels=1-2' --n-eval-2 600 \
  --minutes ${SEED_MINUTES:-10} --pilot-minutes ${PILOT_MINUTES:-1} --max-rounds 5 --eval-backend vllm \
  --set grpo.max_completion_length=256 --work $GSM8K_DIR --out $W/learning_seed_regime_gsm8k_gpu"
versions() {  # the packages importable now, from their metadata (no import): refreshed at the end of every call,
  # since the first call's env step runs before the later bundles (vLLM among them) have arrived
  python3 -c "
import importlib.metadata as md
for p in ('torch','transformers','trl','peft','accelerate','datasets','bitsandbytes','unsloth','unsloth_zoo','vllm'):
    try: print(p, md.version(p))
    except md.PackageNotFoundError: print(p, 'missing')
" > $W/versions.txt 2>&1
}
background() {  # NAME COMMAND...: run in its own session (survives the call), log to $W/NAME.log, touch $W/NAME.done
  local name=$1; shift
  setsid nohup bash -c "$*; echo exit \$? > $W/$name.done" > $W/$name.log 2>&1 < /dev/null &
  echo "started $name in the background (log $W/$name.log)"
}
started() {  # NAME...: whether one of these background jobs was started on this machine; a machine given back
  # between two calls comes back bare, and waiting WAIT_S for a job it never ran burns the call's device time
  local n; for n in "$@"; do [ -f $W/$n.log ] && return 0; done
  echo "none of '$*' was started on this machine (given back between calls?): start them again"; return 1
}
bring_back() {  # NAME STEP SUBDIR: once progress.json says STEP is done (waiting up to WAIT_S), the adapter RUN_DIR/SUBDIR
  # under $OUT as NAME.tgz.part-* (<= 15 MiB each, absolute paths) with its hash in NAME.sha256
  local name=$1 step=$2 sub=$3 run end=$(( $(date +%s) + ${WAIT_S:-300} ))
  until run=$(python3 -c "import json, sys; e = json.load(open('$GSM8K_DIR/progress.json'))['steps'].get('$step', {}); \
print(e['run_dir']) if e.get('state') == 'done' else sys.exit(1)" 2>/dev/null); do
    [ $(date +%s) -ge $end ] && { echo "$step is not done after ${WAIT_S:-300} s: bring $name back in a later call"; return 1; }
    sleep 10
  done
  python3 -c "from grpo_playground.experiments.checkpoints import adapter_sha256; print(adapter_sha256('$run/$sub'))" > $OUT/$name.sha256 || return 1
  tar czf - -C / ${run#/}/$sub | split -b 15M - $OUT/$name.tgz.part-; ls -l $OUT; cat $OUT/$name.sha256
}
progress() {  # the newest run's last log lines (under $W/${1:-speed})
  local log; log=$(ls -t $W/${1:-speed}/runs/*/log.txt 2>/dev/null | head -1)
  [ -n "$log" ] && echo "$(date +%H:%M:%S) $(basename $(dirname $log)): $(grep -c 'grpo step' $log) steps logged; $(tail -1 $log | cut -c1-160)"
}
for step in "$@"; do
  echo "=== $(date +%H:%M:%S) step $step"
  case $step in
    env)
      { nvidia-smi; python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', \
torch.cuda.device_count())"; } > $W/env.txt 2>&1; grep -v "^|" $W/env.txt | tail -3 ;;
    speed-base) background speed-base "$B suite speed-base --gpus 0 --out $W/speed --timeout 300" ;;
    speed) background speed "while [ ! -f $W/speed-base.done ]; do sleep 2; done; $B suite speed --gpus 0 --out $W/speed --timeout 330 --deadline ${SPEED_S:-1200}" ;;
    vllm-smoke) timeout 240 python3 -m benchmarks.vllm_smoke > $W/vllm_smoke.log 2>&1; tail -4 $W/vllm_smoke.log ;;
    wait-speed)
      started speed || continue
      end=$(( $(date +%s) + ${WAIT_S:-500} ))
      while [ ! -f $W/speed.done ] && [ $(date +%s) -lt $end ]; do progress; sleep 20; done
      [ -f $W/speed.done ] && { echo "speed suite done: $(cat $W/speed.done)"; tail -3 $W/speed.log; } ;;
    serve) timeout ${SERVE_S:-420} python3 -m benchmarks.vllm_chat_proof ${SERVE_ARGS:-} > $W/vllm_chat.log 2>&1; tail -25 $W/vllm_chat.log ;;
    share-job-chat|share-chat-job)  # benchmarks.gpu_share_proof: a chat server and a training job on one GPU
      scenario=$([ $step = share-job-chat ] && echo job-then-chat || echo chat-then-job)
      timeout ${SHARE_S:-540} python3 -m benchmarks.gpu_share_proof $scenario --out $W/gpu_share_$scenario.json \
        > $W/gpu_share_$scenario.log 2>&1; tail -30 $W/gpu_share_$scenario.log ;;
    eval-speed) timeout 280 python3 -m benchmarks.eval_speed ${EVAL_ARGS:-} > $W/eval_speed.log 2>&1; tail -10 $W/eval_speed.log ;;
    report) $B report $W/speed --out $W/grpo_step.json && cp $W/grpo_step.json $OUT/ ;;
    # issue 24: each GRPO row is one `python -m pipelines.train` job (benchmarks.gpu_grpo); the plain generate of the
    # same batches (benchmarks.vllm_rollout) runs alone on the GPU: SmolLM2's before the small rows, the 1.7B's last
    # shapes: the random-weight 1.7B and 8B shapes (torch, transformers and the base bundle's tokenizer suffice), written
    # while the other bundle parts travel; the suites wait for it
    shapes) background shapes "$B models --out $W/models --shapes ${SHAPES:-qwen3-1.7b-shape qwen3-8b-shape}" ;;
    grpo-speed) background grpo-speed "timeout 300 $ROLL --model smollm2-135m --tokens 128 --out $SPEED_DIR/vllm_rollout_smollm2.json \
      > $SPEED_DIR/vllm_rollout_smollm2.log 2>&1; $WAIT_SHAPES; $B models --out $W/models --shapes qwen3-1.7b-shape; \
      $B suite targets --models $W/models --gpus 0 --out $SPEED_DIR --timeout 420 --deadline ${SPEED_S:-1200}; \
      timeout 300 $ROLL --model $W/models/qwen3-1.7b-shape --tokens 512 --ignore-eos --share 0.3 \
      --out $SPEED_DIR/vllm_rollout_qwen3-1.7b.json > $SPEED_DIR/vllm_rollout_qwen3-1.7b.log 2>&1" ;;
    # after grpo-speed when both were started here
    grpo-speed-8b) background grpo-speed-8b "while [ -f $W/grpo-speed.log ] && [ ! -f $W/grpo-speed.done ]; do sleep 2; done; \
      $WAIT_SHAPES; $B models --out $W/models --shapes qwen3-8b-shape; \
      $B suite targets-8b --models $W/models --gpus 0 --out $SPEED_DIR --timeout 900 --deadline ${SPEED8_S:-1800}" ;;
    # issue 35: the rented card's budget (gpu_grpo's `budget` suite: each row within 22 GiB, the plan beside the peak)
    grpo-budget) background grpo-budget "$WAIT_SHAPES; $B models --out $W/models --shapes qwen3-1.7b-shape qwen3-8b-shape; \
      $B suite budget --models $W/models --gpus 0 --out $SPEED_DIR --timeout 900 --deadline ${BUDGET_S:-1500}" ;;
    # issue 35's second lease: every shipped Qwen3 recipe as shipped, SFT and GRPO (gpu_grpo's `recipes` suite); start
    # it in the first call, after `shapes` with SHAPES="qwen3-8b-shape qwen3-1.7b-shape qwen3-4b-shape qwen3-0.6b-shape":
    # its SFT rows need only the base bundle, its GRPO rows come after them, once vLLM's parts have arrived
    # (any other SUITE, e.g. recipes-grpo, groups, "fp8 micro-batch" (one after another): GRPO rows alone, which wait
    # for vLLM's bundle)
    grpo-recipes) background grpo-recipes "$WAIT_SHAPES; $B models --out $W/models --shapes ${SHAPES:-qwen3-8b-shape \
      qwen3-1.7b-shape qwen3-4b-shape qwen3-0.6b-shape}; $([ "${SUITE:-recipes}" != recipes ] && echo "$WAIT_VLLM;") \
      $B suite ${SUITE:-recipes} --models $W/models --gpus 0 --out $SPEED_DIR --timeout ${ROW_TIMEOUT_S:-600} --deadline ${BUDGET_S:-1500}" ;;
    wait-grpo-speed)  # follows whichever of grpo-speed, grpo-speed-8b, grpo-budget and grpo-recipes were started here
      started grpo-speed grpo-speed-8b grpo-budget grpo-recipes || continue
      end=$(( $(date +%s) + ${WAIT_S:-500} ))
      while for j in grpo-speed grpo-speed-8b grpo-budget grpo-recipes; do [ -f $W/$j.log ] && [ ! -f $W/$j.done ] && break; done; do
        [ $(date +%s) -ge $end ] && break; progress grpo_speed; sleep 20
      done
      tail -3 $W/grpo-speed.log $W/grpo-speed-8b.log $W/grpo-budget.log $W/grpo-recipes.log 2>/dev/null
      cat $W/grpo-*.done 2>/dev/null ;;
    report-speed) $B report $SPEED_DIR --out $W/grpo_step.json && cp $W/grpo_step.json $OUT/ && $B table $SPEED_DIR ;;
    # seed-sft: the data and sft-W alone (TRL and SmolLM2 suffice: it can run while the vLLM parts still travel);
    # seed-regime: after seed-sft (if started) and BEFORE_SEED, the whole experiment (sft-W is then skipped), its
    # four checkpoints evaluated through vLLM if an eval-speed run's vLLM evaluation finished, else transformers
    seed-sft) background seed-sft "$SEED --eval-backend transformers --only-sft-w" ;;
    seed-regime) background seed-regime "while [ -f $W/seed-sft.log ] && [ ! -f $W/seed-sft.done ]; do sleep 2; done; \
      ${BEFORE_SEED:-true}; EB=\$(ls $W/eval_speed*.vllm.json >/dev/null 2>&1 && echo vllm || echo transformers); \
      $SEED --eval-backend \$EB" ;;
    space-e2e) background space-e2e "env -u GRPO_PLAYGROUND_CACHE python3 -m benchmarks.space_e2e --gpu \
      --recipe recipes/smollm2.yaml ${E2E_ARGS:-} --data-root $W/space_data --out $W/space_e2e.json --logs $W/space_e2e" ;;
    gpu-proofs)  # issue 23 in one background chain: the vLLM chat proof alone on the GPU, then the Space end to end
      background gpu-proofs "timeout ${SERVE_S:-420} python3 -m benchmarks.vllm_chat_proof --out $W/vllm_chat.json \
        > $W/vllm_chat.log 2>&1; echo chat-proof exit \$?; env -u GRPO_PLAYGROUND_CACHE python3 -m benchmarks.space_e2e \
        --gpu --recipe recipes/smollm2.yaml ${E2E_ARGS:-} --data-root $W/space_data --out $W/space_e2e.json \
        --logs $W/space_e2e > $W/space-e2e.log 2>&1; echo e2e exit \$?" ;;
    wait-proofs)
      started gpu-proofs || continue
      end=$(( $(date +%s) + ${WAIT_S:-500} ))
      while [ ! -f $W/gpu-proofs.done ] && [ $(date +%s) -lt $end ]; do
        echo "$(date +%H:%M:%S) chat proof: $(tail -1 $W/vllm_chat.log 2>/dev/null | cut -c1-150) | e2e: $(grep '^\[e2e\]' $W/space-e2e.log 2>/dev/null | tail -1 | cut -c1-200)"
        sleep 20
      done
      cat $W/gpu-proofs.log; tail -30 $W/vllm_chat.log; grep '^\[e2e\]' $W/space-e2e.log | cut -c1-400 ;;
    wait-e2e)
      started space-e2e || continue
      end=$(( $(date +%s) + ${WAIT_S:-500} ))
      while [ ! -f $W/space-e2e.done ] && [ $(date +%s) -lt $end ]; do
        echo "$(date +%H:%M:%S) $(grep '^\[e2e\]' $W/space-e2e.log | tail -1 | cut -c1-220)"; sleep 15
      done
      grep '^\[e2e\]' $W/space-e2e.log | cut -c1-400; [ -f $W/space-e2e.done ] && cat $W/space-e2e.done ;;
    gsm8k-data)  # the carried GSM8K files to $W/gsm8k (kept while the machine stays warm). Carry .carry/gsm8k in a call
      # of its own: with the tracked tree, a 50 MiB part and GSM8K are over a call's 64 MiB
      mkdir -p $W/gsm8k && cp .carry/gsm8k/train.jsonl .carry/gsm8k/test.jsonl $W/gsm8k/ || exit 1
      wc -l $W/gsm8k/*.jsonl ;;
    gsm8k-sft) background gsm8k-sft "$SEEDG --only-sft-w" ;;  # lease 1, TRL + SmolLM2 suffice (after .whlp2)
    gsm8k-lease1)  # lease 1: once sft-W and vLLM are there, the pilots, then the GRPO arm; both scored, no report yet
      background gsm8k-lease1 "while [ ! -f $W/gsm8k-sft.done ] || [ ! -f /tmp/dev/done.vllm ]; do sleep 2; done; \
        $SEEDG $PILOTS --only-arms grpo_a" ;;
    gsm8k-bring-back) bring_back sft_w sft_w sft ;;  # lease 1's sft-W, as soon as it is trained: lease 2 starts from it
    gsm8k-bring-back-grpo) bring_back grpo_a sft_w+grpo_a grpo ;;  # the GRPO arm: lease 2 scores it if lease 1 could not
    gsm8k-restore)  # lease 2: lease 1's work folder (its bench tgz: no weights, no data), sft-W's adapter and GRPO's
      tar xzf $(ls .carry/lease1/bench_*.tgz | tail -1) -C $W ./seed_gsm8k || exit 1
      for name in sft_w grpo_a; do  # grpo_a only when lease 1 could not score it (carried in .carry/lease1grpo)
        parts=$(ls .carry/lease1*/$name.tgz.part-* 2>/dev/null) || continue
        cat $parts | tar xzf - -C / || exit 1; echo "$name restored"
      done
      python3 -c "from grpo_playground.experiments.checkpoints import carried_sft_w; from pathlib import Path; \
carried_sft_w(Path('$GSM8K_DIR'), open('.carry/lease1/sft_w.sha256').read().strip()); print('sft-W hash ok')" ;;
    gsm8k-lease2)  # lease 2: the two SFT arms from the carried sft-W (hash checked first), all evaluations, the report
      background gsm8k-lease2 "$SEEDG $PILOTS --sft-w-sha256 $(cat .carry/lease1/sft_w.sha256 2>/dev/null)" ;;
    wait-gsm8k)  # follows the latest stage of the experiment started here (lease2, else lease1, else sft-W)
      job=none; for j in gsm8k-lease2 gsm8k-lease1 gsm8k-sft; do [ -f $W/$j.log ] && { job=$j; break; }; done
      started $job || continue
      end=$(( $(date +%s) + ${WAIT_S:-500} ))
      while [ ! -f $W/$job.done ] && [ $(date +%s) -lt $end ]; do
        echo "$(date +%H:%M:%S) $job $(python3 -c "import json; p=json.load(open('$GSM8K_DIR/progress.json'))['steps']; print(*[k + ':' + v['state'] for k, v in p.items()])" 2>/dev/null) | $(tail -1 $W/$job.log | cut -c1-150)"
        sleep 20
      done
      [ -f $W/$job.done ] && { echo "$job done: $(cat $W/$job.done)"; tail -40 $W/$job.log; } ;;
    wait-seed)  # follows the seed-regime job until done or WAIT_S
      started seed-regime || continue
      end=$(( $(date +%s) + ${WAIT_S:-500} ))
      while [ ! -f $W/seed-regime.done ] && [ $(date +%s) -lt $end ]; do
        echo "$(date +%H:%M:%S) $(python3 -c "import json; p=json.load(open('$W/seed/progress.json'))['steps']; print(*[k + ':' + v['state'] for k, v in p.items()])" 2>/dev/null) | $(tail -1 $W/seed-regime.log | cut -c1-150)"
        sleep 20
      done
      [ -f $W/seed-regime.done ] && { echo "seed regime done: $(cat $W/seed-regime.done)"; tail -40 $W/seed-regime.log; } ;;
  esac
done
versions; echo "packages here: $(tr '\n' ' ' < $W/versions.txt)"
# pack every log and result so far (no weights, no checkpoints) and show every run
# (GSM8K and the sets drawn from it stay out: the tgz's logs go into the repo)
tar czf $OUT/bench_$(date +%H%M%S).tgz -C $W --exclude=./gsm8k --exclude=./seed_gsm8k/data --exclude='*.safetensors' --exclude=space_data/hf --exclude=./space_data/cache/compile --exclude=./space_data/cache/models --exclude='*.parquet' --exclude='*.bin' --exclude='*.pt' \
  --exclude='*.pth' --exclude=checkpoints --exclude=models --exclude='*.gguf' --exclude=tokenizer.json --exclude=vocab.json \
  --exclude=merges.txt --exclude='unsloth_compiled*' . 2>/dev/null
for d in $W/speed $SPEED_DIR; do [ -d $d/results ] && $B table $d; done > $W/table.md 2>/dev/null; cat $W/table.md
