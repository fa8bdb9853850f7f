# Source at the start of every device call that carries a .whlpN folder (see build_bundles.sh):
#   source benchmarks/device_setup.sh
# Appends the carried part(s) to /tmp/dev (kept while the machine stays warm), unpacks into /tmp/site every
# bundle whose bytes are now all there, and sets PYTHONPATH/PATH for the product. Prints what is ready.
mkdir -p /tmp/dev /tmp/site/bin
for d in .whlp*; do
  [ -d "$d" ] || continue
  cp -n "$d"/part.* /tmp/dev/ 2>/dev/null; cp "$d"/MANIFEST /tmp/dev/MANIFEST
done
python3 - <<'PY'
import glob, io, os, tarfile
parts = sorted(glob.glob("/tmp/dev/part.*"), key=lambda p: int(p.rsplit(".", 1)[1]))
# only a gap-free prefix of parts counts
have = []
for i, p in enumerate(parts):
    if not p.endswith(f".{i}"):
        break
    have.append(p)
size = sum(os.path.getsize(p) for p in have)
offset = 0
for line in open("/tmp/dev/MANIFEST"):
    name, length, _ = line.split()
    length = int(length)
    start, end = offset, offset + length
    offset = end
    done = f"/tmp/dev/done.{name}"
    if os.path.exists(done):
        print(f"bundle {name}: ready"); continue
    if end > size:
        print(f"bundle {name}: {max(0, size - start) / 1e6:.0f}/{length / 1e6:.0f} MB here"); continue
    buf, pos = bytearray(), 0
    for p in have:  # read bytes [start, end) across part files
        n = os.path.getsize(p)
        lo, hi = max(start, pos), min(end, pos + n)
        if lo < hi:
            with open(p, "rb") as f:
                f.seek(lo - pos); buf += f.read(hi - lo)
        pos += n
    tarfile.open(fileobj=io.BytesIO(bytes(buf)), mode="r:gz").extractall("/tmp/site")
    open(done, "w").close()
    print(f"bundle {name}: unpacked")
PY
# bytecode now, as pip does when a Docker image is built: otherwise the first vLLM server or engine of the run
# compiles thousands of modules and its start time is not what a Space user meets (up-to-date files are skipped)
python3 -m compileall -q -j 0 /tmp/site > /dev/null 2>&1 || true
printf '#!/bin/sh\nexec python3 -c "from vllm.entrypoints.cli.main import main; main()" "$@"\n' > /tmp/site/bin/vllm
chmod +x /tmp/site/bin/vllm
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PATH=/tmp/site/bin:$PATH
# Child processes that set their own PYTHONPATH (the learning experiment does) still find the carried packages.
echo /tmp/site > "$(python3 -c 'import site; print(site.getsitepackages()[0])')/zz_carried_site.pth"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 SWANLAB_MODE=disabled TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
# No flashinfer in the bundle: vLLM's sampler falls back to its PyTorch one.
export VLLM_USE_FLASHINFER_SAMPLER=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export GRPO_PLAYGROUND_CACHE=/tmp/gp_cache
# the app bundle's llama.cpp converters (a venv keeps them in share/; here they travel in the bundle)
export GRPO_PLAYGROUND_LLAMA_CPP_CONVERTERS=/tmp/site/llama.cpp-converters
