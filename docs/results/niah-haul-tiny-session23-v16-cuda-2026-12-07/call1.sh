#!/usr/bin/env bash
# session 23 call 1 (an H100, 560 s): data version 16 for 300 s from the shipped folder (session 21's
# mean), then device_train_and_sweep.sh's sweeps of the shipped folder, the EMA and the last weights.
# Payload: PYTHON=/tmp/v/bin/python tools/train_tiny/stage.sh .dev/train; .dev/niah as
# tools/train_tiny/README.md says (build-gpu's longhaul at 8e7df32). carry [".dev/train", ".dev/niah"].
# The call was cut by the timeout during the last weights' 256K / 1M sweep.
TRAIN_S=300 timeout 560 bash tools/train_tiny/device_train_and_sweep.sh --data-version 16 --ema-decay 0.997
ls -la $OUT
