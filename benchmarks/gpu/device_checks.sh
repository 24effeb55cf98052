#!/usr/bin/env bash
# The GPU checks, as one script for a session that is lent the device (see ../shared/gpu/README.md
# beside the project for getting cuDF there). Not run yet: no session so far had a device.
#
# The device image has CUDA, numba-cuda, pyarrow and pandas but no cuDF, pyspark, httpx or
# jsonschema, which dspark_json imports. Stage them with cuDF, e.g.
#   EXTRA_WHEELS='pyspark==4.3.* py4j httpx jsonschema pytest' bash ../shared/gpu/stage-cudf.sh
# then, on the last call: cp ../shared/gpu/install-staged.sh benchmarks/gpu/ (before the call) and
#   bash benchmarks/gpu/install-staged.sh && bash benchmarks/gpu/device_checks.sh
#
# Writes under $OUT, in this order (cheapest and most telling first; each step bounded by
# `timeout`, so one that hangs leaves time for the rest). The bounds add up to 420 s, so that the
# install and the checks fit in one device call (600 s at most) and in a session's 15 minutes of
# device time with the machine's start and the staging calls:
#   device.txt          the device, cuDF's version, whether the backend says it can run
#   cudf_numbers.json   what the doubles rest on: cuDF's str dtype keeps a number's text, the device
#                       converts it as float() does, int64 of 16-18 digits (HAZARD_DIGITS)
#   device_kernels.txt  tests/parse/gpu on the device itself (no simulator where nvidia-smi is):
#                       the fit kernel against the CPU scans, the doubles' conversion, the GPU
#                       backend end to end (with the cuDF stand-in)
#   conformance.txt     the backend conformance suite, CPU and GPU backends side by side (cuDF)
#   results/gpu_fit_throughput.{md,json}  rows/s and GB/s, CPU and GPU backends, fit alone,
#                       at $SIZES bodies
#   results/parser_throughput.*  the parser benchmark with its GPU column (no Spark: no JVM)
# tests/test_device_checks.py keeps it valid without a device: the paths it names exist, its
# pytest runs collect, and the benchmarks take the flags it passes.
set -uo pipefail
export PYTHONPATH="$PWD/.gpusite:$PWD:${PYTHONPATH:-}"
OUT="${OUT:-/tmp/dspark-gpu-out}"
SIZES="${SIZES:-100000 1000000 10000000}"
mkdir -p "$OUT/results"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/device.txt"
python3 -c "import cudf, dspark_json.parse.gpu as g; print('cudf', cudf.__version__, 'gpu:', g.unavailable_reason() or 'available')" \
  | tee -a "$OUT/device.txt"
timeout 45 python3 benchmarks/gpu/cudf_numbers.py --count 100000 --out "$OUT" \
  2>&1 | tail -40 | tee "$OUT/cudf_numbers.txt"
timeout 120 python3 -m pytest -q -rs -p no:cacheprovider tests/parse/gpu \
  2>&1 | tail -40 | tee "$OUT/device_kernels.txt"
timeout 75 python3 -m pytest -q -rs -p no:cacheprovider tests/parse/test_backend_conformance.py tests/parse/test_kernels.py \
  2>&1 | tail -40 | tee "$OUT/conformance.txt"
# shellcheck disable=SC2086  # SIZES is a list of numbers
timeout 90 python3 benchmarks/gpu/fit_throughput.py --sizes $SIZES --repeat 2 --out "$OUT/results" \
  2>&1 | tail -30 | tee "$OUT/fit_throughput.txt"
timeout 90 python3 benchmarks/parser_throughput.py --no-spark --rows "${ROWS:-50000}" --out "$OUT/results" \
  2>&1 | tail -20 | tee "$OUT/benchmark.txt"
