#!/usr/bin/env bash
# make_payload.sh — gather what bench/cuda/run_device.sh needs into /work/main/.dev/cuda (git-ignored
# there), from a CUDA build of this worktree: the bench and test programs and longhaul, the shared libraries the GPU box
# lacks (shared/gpu/carry-libs.sh), the peers script and the optional flash-linear-attention wheel.
# Usage: bench/cuda/make_payload.sh [BUILD_DIR] [WHEEL_DIR]
# (gpu_model_parity, gpu_ranks and nccl_world are carried when the build made them: nccl_world needs NCCL.)
# Configure BUILD_DIR with -DLH_CAIRO=OFF: the GPU box has no fontconfig, so a longhaul linked with
# cairo does not start there (seen 2026-12-03).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build}
whl=${2:-}
dest=/work/main/.dev/cuda
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/whl"
cp "$build/tests/gpu/gpu_parity" "$build/bench/cuda/bench_cuda" "$dest/bin/"
if [ -x "$build/tests/gpu/gpu_model_parity" ]; then cp "$build/tests/gpu/gpu_model_parity" "$dest/bin/"; fi
if [ -x "$build/tests/gpu/nccl_world" ]; then cp "$build/tests/gpu/nccl_world" "$dest/bin/"; fi
if [ -x "$build/tests/gpu/gpu_ranks" ]; then cp "$build/tests/gpu/gpu_ranks" "$dest/bin/"; fi  # run_device_ranks.sh
if [ -x "$build/longhaul" ]; then cp "$build/longhaul" "$dest/bin/"; fi  # for run_device_niah*.sh
cp "$here/tools/bench_peers/peers.py" "$here/tools/bench_peers/slice_hf.py" "$here/bench/cuda/run_device.sh" \
  "$here/bench/cuda/run_device_long.sh" "$here/bench/cuda/run_device_4m.sh" "$here/bench/cuda/run_device_niah.sh" \
  "$here/bench/cuda/run_device_niah_families.sh" "$here/bench/cuda/run_device_ship_checks.sh" \
  "$here/bench/cuda/run_device_ranks.sh" "$here/bench/cuda/run_device_lightning.sh" \
  "$here/bench/cuda/ncu_lightning.sh" "$here/bench/cuda/sanitize_lightning.sh" \
  "$here/bench/cuda/run_device_sdpa.sh" "$dest/"
if [ -n "$whl" ]; then cp "$whl"/*.whl "$dest/whl/"; fi
# carry-libs.sh exits non-zero when a binary needs nothing from its list (its grep finds nothing).
mkdir -p "$dest/libs"
for b in "$dest"/bin/*; do
  (cd /work/main && /work/shared/gpu/carry-libs.sh --dest .dev/cuda/libs "$b" >/dev/null) || true
done
du -sh "$dest"
ls -R "$dest" | head -30
