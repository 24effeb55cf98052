import json
import subprocess
import sys


def test_import_leaves_gpu_modules_and_deltalake_unimported():
    code = "import sys, json, dspark_json;print(json.dumps(sorted(m for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    for heavy in ("cudf", "cupy", "rmm", "numba.cuda", "deltalake"):
        assert heavy not in loaded, f"import dspark_json imported {heavy}"
