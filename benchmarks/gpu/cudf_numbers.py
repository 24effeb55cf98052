"""The assumptions the GPU backend's numbers rest on, checked on a device with cuDF (nothing here
runs without one): seeded JSON numbers (fractions, exponents, long digit runs, the fast path's
edges), read by cuDF's JSON reader as the backend reads them.

1. ``str_is_the_literal``: a ``str`` dtype gives each number's own text, at the top level, in a
   list inside a struct, and with whitespace around it (parse/gpu/reader.py reads every double
   column so; parse/gpu/doubles.py converts the text); ``str_null_is_null``: a JSON null or a
   missing key is a null there, not the text ``null`` (the device refuses text that is no
   number, ``NotANumber``, and the batch goes to the reference parser);
2. ``device_differs``: that text converted by the device kernel (the CPU's ``_double_of``
   compiled for CUDA, the rest by ``float`` on the host) against Python's ``float``, bit for
   bit: must be 0;
3. ``int64_differs``: integers of 16-18 digits read into an int64 column against ``int``
   (0 would let :data:`~dspark_json.parse.gpu.fit.HAZARD_DIGITS` go);
4. ``float64_differs``: cuDF's own float64 read against ``float``, for the record (why the
   doubles are read as text).

    python3 benchmarks/gpu/cudf_numbers.py --count 100000 --out results
"""

from __future__ import annotations

import argparse
import io
import json
import random
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def numbers(count: int, seed: int = 3) -> list[str]:
    """Seeded JSON numbers of every shape a double column sees."""
    rng = random.Random(seed)
    edges = ["0", "-0.0", "1e22", "1e-22", "1e23", "9007199254740993", "0.30000000000000004"]
    out = list(edges)
    for _ in range(count - len(edges)):
        shape = rng.randrange(6)
        if shape == 0:
            out.append(repr(round(rng.random(), rng.randint(1, 6))))  # 0.3, 0.87
        elif shape == 1:
            out.append(repr(rng.random()))  # 17 significant digits
        elif shape == 2:
            sign = rng.choice(["", "+", "-"])
            out.append(f"{rng.randint(1, 9)}{rng.choice('eE')}{sign}{rng.randint(0, 30)}")
        elif shape == 3:
            out.append(str(rng.randint(10**15, 10**18)))  # 16-19 digits
        elif shape == 4:
            out.append(f"-{rng.randint(0, 10**6)}.{rng.randint(0, 10**6):06d}")
        else:
            out.append(f"{rng.randint(0, 999)}.{rng.randint(0, 99):02d}e{rng.randint(-25, 25)}")
    return out


def _bits(value: float | None) -> int | None:
    return None if value is None else struct.unpack("<q", struct.pack("<d", value))[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    import cudf

    from dspark_json.parse.gpu.doubles import DeviceDoubles

    texts = numbers(args.count)
    want = [_bits(float(t)) for t in texts]
    report: dict[str, object] = {"count": len(texts), "cudf": cudf.__version__}

    def read(lines: str, dtype: object) -> object:
        return cudf.read_json(io.BytesIO(lines.encode()), engine="cudf", lines=True, dtype=dtype)

    def attempt(name: str, check: object) -> None:
        try:
            report[name] = check()  # type: ignore[operator]
        except Exception as exc:  # cuDF's errors have no common base
            report[name] = f"error: {type(exc).__name__}: {exc}"

    flat = "".join(f'{{"x":{t}}}\n' for t in texts)
    nested = "".join(f'{{"x":{{"y":[{t}, {t}]}}}}\n' for t in texts)
    spaced = "".join(f'{{"x": {t} , "z":1}}\n' for t in texts)
    attempt(
        "str_is_the_literal", lambda: read(flat, {"x": "str"})["x"].to_arrow().to_pylist() == texts
    )
    attempt(
        "str_is_the_literal_nested",
        lambda: (
            read(nested, {"x": cudf.StructDtype({"y": cudf.ListDtype("str")})})["x"]
            .to_arrow()
            .to_pylist()
            == [{"y": [t, t]} for t in texts]
        ),
    )
    attempt(
        "str_null_is_null",
        lambda: (
            read('{"x":null}\n{"z":1}\n{"x":0.5}\n', {"x": "str"})["x"].to_arrow().to_pylist()
            == [None, None, "0.5"]
            and read(
                '{"x":{"y":[null, 0.5]}}\n{"x":{"y":null}}\n',
                {"x": cudf.StructDtype({"y": cudf.ListDtype("str")})},
            )["x"]
            .to_arrow()
            .to_pylist()
            == [{"y": [None, "0.5"]}, {"y": None}]
        ),
    )
    attempt(
        "str_with_spaces",
        lambda: _mismatch(read(spaced, {"x": "str"})["x"].to_arrow().to_pylist(), texts),
    )

    def device() -> object:
        doubles = DeviceDoubles()
        raw = read(flat, {"x": "str"})["x"].to_arrow()
        got = [_bits(v) for v in doubles.convert(raw).to_pylist()]
        wrong = [t for t, g, w in zip(texts, got, want, strict=True) if g != w]
        return {"differs": len(wrong), "examples": wrong[:10], "host_values": doubles.host_values}

    attempt("device_differs", device)
    integers = [t for t in texts if t.isdigit() and 16 <= len(t) <= 18]
    lines = "".join(f'{{"n":{t}}}\n' for t in integers)
    attempt(
        "int64_differs",
        lambda: sum(
            g != int(t)
            for g, t in zip(
                read(lines, {"n": "int64"})["n"].to_arrow().to_pylist(), integers, strict=True
            )
        ),
    )
    attempt(
        "float64_differs",
        lambda: sum(
            _bits(g) != w
            for g, w in zip(
                read(flat, {"x": "float64"})["x"].to_arrow().to_pylist(), want, strict=True
            )
        ),
    )
    text = json.dumps(report, indent=1)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "cudf_numbers.json").write_text(text)
    return 0


def _mismatch(got: list[object], texts: list[str]) -> object:
    """True where cuDF's text is the number's, else how it differs (a few examples)."""
    wrong = [(t, g) for t, g in zip(texts, got, strict=True) if g != t]
    return True if not wrong else {"differs": len(wrong), "examples": wrong[:5]}


if __name__ == "__main__":
    raise SystemExit(main())
