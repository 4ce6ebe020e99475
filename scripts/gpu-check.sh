#!/usr/bin/env bash
# Issue 38's check for a machine with a GPU: grading there behaves as on a CPU-only machine.  Every pack's
# reference is graded twice with the GPU visible and twice with it hidden from the whole command
# (`CUDA_VISIBLE_DEVICES=`), as root with every layer on; each must score exactly, and each grade with the
# GPU visible may take at most 1.5x the same pack's grades with it hidden (scripts/gpu_check.py).
#
#   bash scripts/gpu-check.sh WHEELS_DIR
#
# WHEELS_DIR holds the grader's wheel and its dependencies' wheels, made where there is a network
# (`pip wheel . -w wheels`, on the same Python version); torch, triton and nvidia-* wheels in it are
# skipped.  No network is used: pip installs with --no-index into a venv that sees the machine's own
# site-packages, so the grading uses the machine's own torch (a CUDA build, typically).  Under a torch
# that is not a tested release it grades anyway (GRADER_UNTESTED_TORCH=1) and says so.
#   PYTHON     the machine's Python with torch (default python3)
#   ROUNDS     gradings per pack and setting (default 2); RATIO (default 1.5); TIMEOUT_S a grade (600)
#   PACKS      which references (default a9,a4,hw12,a5)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
say() { printf '[gpu-check] %s\n' "$*" >&2; }
die() { printf '[gpu-check] FAILED: %s\n' "$*" >&2; exit 1; }

[[ $# -eq 1 && -d $1 ]] || die "usage: bash scripts/gpu-check.sh WHEELS_DIR (the grader's and its dependencies' wheels)"
WHEELS=$(cd "$1" && pwd)
[[ $EUID -eq 0 ]] || die "run it as root: the check grades with every layer on"
"$PYTHON" -c "import torch" 2>/dev/null || die "$PYTHON has no torch: the check uses the machine's own"

work=$(mktemp -d /tmp/gpu-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$PYTHON" -m venv --system-site-packages "$work/venv"
mapfile -t wheels < <(find "$WHEELS" -maxdepth 1 -name '*.whl' ! -name 'torch-*' ! -name 'triton-*' ! -name 'nvidia[-_]*' | sort)
if ! printf '%s\n' "${wheels[@]}" | grep -q '/dist_grader-'; then die "$WHEELS holds no dist_grader wheel"; fi
# --force-reinstall: into the venv, even where the machine's site-packages has the same version already
"$work/venv/bin/python" -m pip install -q --no-index --no-deps --force-reinstall "${wheels[@]}"
machine=$("$work/venv/bin/python" - <<'PY'
import os, sys, torch
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU visible"
print(f"Python {sys.version.split()[0]}, torch {torch.__version__}, {gpu}, {os.cpu_count()} cores")
PY
)
say "$machine"
if ! "$work/venv/bin/python" -c 'from grader.torch_support import check_torch, installed_torch; check_torch(installed_torch(), environ={})' 2>/dev/null; then
    say "this torch is not a tested release: grading anyway (GRADER_UNTESTED_TORCH=1)"
    export GRADER_UNTESTED_TORCH=1
fi
"$work/venv/bin/python" "$ROOT/scripts/gpu_check.py" --python "$work/venv/bin/python" --out "$work/out" \
    --rounds "${ROUNDS:-2}" --ratio "${RATIO:-1.5}" --timeout "${TIMEOUT_S:-600}" --packs "${PACKS:-a9,a4,hw12,a5}"
