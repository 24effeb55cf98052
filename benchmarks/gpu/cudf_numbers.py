"""How cuDF's JSON reader reads numbers, next to Python's ``float`` (correctly rounded, as the
CPU backend and pyarrow read them): the share of seeded decimals (fractions, exponents, long
digit runs) whose double differs, read as float64 and, for the other way out, read as text
(``str`` dtype) then cast by pyarrow. The GPU backend sends every number with a fraction or an
exponent to the reference parser (:func:`dspark_json.parse.gpu.fit.reader_hazards`); these
figures say whether a narrower rule would do. Needs cuDF (a device).

    python3 benchmarks/gpu/cudf_numbers.py --count 100000 --out results
"""

from __future__ import annotations

import argparse
import io
import json
import random
from pathlib import Path


def numbers(count: int, seed: int = 3) -> list[str]:
    """Seeded JSON numbers of every shape the hazard rule covers."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        shape = rng.randrange(5)
        if shape == 0:
            out.append(repr(round(rng.random(), rng.randint(1, 6))))  # 0.3, 0.87
        elif shape == 1:
            out.append(repr(rng.random()))  # 17 significant digits
        elif shape == 2:
            out.append(f"{rng.randint(1, 9)}e{rng.randint(-30, 30)}")
        elif shape == 3:
            out.append(str(rng.randint(10**15, 10**18)))  # 16-19 digits
        else:
            out.append(f"{rng.randint(0, 10**6)}.{rng.randint(0, 10**6):06d}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    import cudf
    import pyarrow as pa
    import pyarrow.compute as pc

    texts = numbers(args.count)
    lines = "".join(f'{{"x":{t}}}\n' for t in texts).encode()
    want = [float(t) for t in texts]
    report: dict[str, object] = {"count": len(texts), "cudf": cudf.__version__}
    as_double = cudf.read_json(io.BytesIO(lines), lines=True, dtype={"x": "float64"})
    got = as_double["x"].to_arrow().to_pylist()
    wrong = [(t, g, w) for t, g, w in zip(texts, got, want, strict=True) if g != w]
    report["float64_differs"] = len(wrong)
    report["float64_examples"] = [list(map(str, e)) for e in wrong[:10]]
    try:
        as_text = cudf.read_json(io.BytesIO(lines), lines=True, dtype={"x": "str"})
        raw = as_text["x"].to_arrow()
        report["str_is_the_literal"] = raw.to_pylist() == texts
        cast = pc.cast(raw, pa.float64()).to_pylist()
        report["str_then_pyarrow_differs"] = sum(g != w for g, w in zip(cast, want, strict=True))
    except Exception as exc:  # cuDF's errors have no common base
        report["str_error"] = f"{type(exc).__name__}: {exc}"
    text = json.dumps(report, indent=1)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "cudf_numbers.json").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
