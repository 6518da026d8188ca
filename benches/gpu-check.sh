#!/usr/bin/env bash
# The GPU class on a real GPU, end to end through `mapi dev`: a small
# `dl.cnn_classifier` run of class GPU must record `dl.backend = gpu`, carry
# no GPU_UNAVAILABLE warning, say in its metrics.json that it trained on
# CUDA, and be charged its accelerator-seconds; then the same run with
# `dl.backend = cpu` gives the CPU's epoch time to compare.
#
# Needs a machine with an NVIDIA GPU and its driver (`nvidia-smi` lists
# it). Installs what it needs on first use: PyTorch with its CUDA runtime,
# the wheels base-dl pins (images/base-dl-requirements.txt, by hash), in a
# venv over Debian's Python (numpy, pandas, matplotlib from Debian) under
# ~/.cache/mapi-tools; and the release build of mapi and mapi-worker.
# Traffic stays on 127.0.0.1. Exits 2, saying so, where no GPU is visible;
# CI never runs it.
#
#   benches/gpu-check.sh [EPOCHS]     # default 5
set -euo pipefail
cd "$(dirname "$0")/.."
readonly epochs=${1:-5}
readonly venv=${HOME:-/tmp}/.cache/mapi-tools/torch-cu124
readonly mapi=target/release/mapi

if ! gpus=$(nvidia-smi -L 2>/dev/null) || ! grep -q '^GPU ' <<<"$gpus"; then
  echo "gpu-check: no GPU available: nvidia-smi lists none on $(hostname)" >&2
  exit 2
fi
echo "gpu-check: $(head -n1 <<<"$gpus")"

/usr/bin/python3 -c 'import numpy, pandas, matplotlib' 2>/dev/null || {
  apt-get update -qq && apt-get install -y -qq python3-numpy python3-pandas python3-matplotlib python3-venv
}
if [ ! -x "$venv/bin/python3" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install -q --no-deps --require-hashes -r images/base-dl-requirements.txt
fi
"$venv/bin/python3" -I -c 'import torch; assert torch.cuda.is_available(), "PyTorch sees no CUDA device"; print("gpu-check: torch", torch.__version__, torch.cuda.get_device_name(0))'
if [ ! -x "$mapi" ] || [ ! -x target/release/mapi-worker ]; then
  cargo build --release -p mapi-cli -p mapi-worker
fi

home=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
export MAPI_HOME=$home MAPI_PYTHON=$venv/bin/python3 MAPI_URL=http://127.0.0.1:$port
"$mapi" dev --port "$port" >"$home/dev.log" 2>&1 &
dev=$!
trap 'kill "$dev" 2>/dev/null; wait "$dev" 2>/dev/null; rm -rf "$home"' EXIT
for _ in $(seq 100); do
  curl -fsS "$MAPI_URL/health" >/dev/null 2>&1 && break
  sleep 0.2
done
curl -fsS "$MAPI_URL/health" >/dev/null

dataset=$("$mapi" --json datasets upload examples/digits.csv | "$venv/bin/python3" -c 'import json,sys; print(json.load(sys.stdin)["id"])')

# Submits a run of class GPU with dl.backend $1, waits for it; prints its view as JSON.
fit() {
  local id
  id=$("$mapi" --json runs submit --method dl.cnn_classifier --dataset "$dataset" --class GPU \
    --param y=digit --param epochs="$epochs" --param dl.backend="$1" |
    "$venv/bin/python3" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  "$mapi" runs watch "$id" >/dev/null 2>&1 || true
  "$mapi" --json runs get "$id" >"$home/$1.json"
  "$mapi" runs output "$id" metrics.json --raw >"$home/$1-metrics.json"
}
fit auto
fit cpu

"$venv/bin/python3" - "$home" <<'EOF'
import json, sys
home = sys.argv[1]
gpu, cpu = (json.load(open(f"{home}/{b}.json")) for b in ("auto", "cpu"))
mg, mc = (json.load(open(f"{home}/{b}-metrics.json")) for b in ("auto", "cpu"))
problems = []
if gpu["state"] != "succeeded":
    problems.append(f"the GPU run ended {gpu['state']}: {gpu.get('error')}")
if gpu["params"].get("dl.backend") != "gpu":
    problems.append(f"dl.backend is {gpu['params'].get('dl.backend')!r}, not 'gpu'")
if any(w["code"] == "GPU_UNAVAILABLE" for w in gpu.get("warnings", [])):
    problems.append("the run carries GPU_UNAVAILABLE")
if mg.get("backend") != "gpu":
    problems.append(f"metrics.json says it trained on {mg.get('backend')!r}")
charge = (gpu.get("attempts") or [{}])[-1].get("charge") or {}
if not charge.get("accelerator_ms"):
    problems.append(f"no accelerator-seconds charged: {charge}")
print(f"GPU run   {gpu['id']}: dl.backend={gpu['params'].get('dl.backend')}, device {mg.get('device')}, "
      f"warnings {[w['code'] for w in gpu.get('warnings', [])]}, accelerator_ms {charge.get('accelerator_ms')}")
print(f"epoch time on GPU: {mg['mean_epoch_seconds']:.3f} s; on CPU: {mc['mean_epoch_seconds']:.3f} s "
      f"({mc['mean_epoch_seconds'] / mg['mean_epoch_seconds']:.1f}x), hold-out accuracy "
      f"{mg['holdout_accuracy']:.4f} (GPU) vs {mc['holdout_accuracy']:.4f} (CPU)")
if problems:
    print("gpu-check FAILED:\n  " + "\n  ".join(problems))
    sys.exit(1)
print("gpu-check passed")
EOF
