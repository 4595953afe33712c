#!/bin/sh
# The whole suite on a GPU machine that has only sh and python3 (with a
# CUDA torch), from build/gpu-check, which `make gpu-pack` makes on the
# development machine (docs/matrix.md).  GPU_CHECK_PYTHON picks another
# python3 (one whose torch is the one to test).
#     tools/gpu-check.sh [OUT]     (make gpu-check): log and junit file in OUT
cd "$(dirname "$0")/.." || exit 1
exec "${GPU_CHECK_PYTHON:-python3}" tools/gpu_check.py "$@"
