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
# Writes under $OUT: the conformance run (CPU and GPU backends side by side) and the parser
# benchmark without the Spark contenders (no JVM there), as results/ files. tests/test_device_checks.py
# keeps it valid without a device: the paths it names exist, its pytest runs collect, and the
# benchmark takes the flags it passes.
set -uo pipefail
export PYTHONPATH="$PWD/.gpusite:$PWD:${PYTHONPATH:-}"
OUT="${OUT:-/tmp/dspark-gpu-out}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/device.txt"
python3 -c "import cudf, dspark_json.parse.gpu as g; print('cudf', cudf.__version__, 'gpu:', g.unavailable_reason() or 'available')" \
  | tee -a "$OUT/device.txt"
python3 -m pytest -q -p no:cacheprovider tests/parse/test_backend_conformance.py tests/parse/test_kernels.py \
  2>&1 | tail -40 | tee "$OUT/conformance.txt"
python3 benchmarks/parser_throughput.py --no-spark --rows "${ROWS:-200000}" --out "$OUT/results" \
  2>&1 | tail -20 | tee "$OUT/benchmark.txt"
