"""The parse stage: response bodies -> Arrow columns, on the CPU (numba + pyarrow) or the
GPU (cuDF), behind one seam: :func:`select_backend`, then
``make_parser(schema, backend).parse(bodies)``.
"""

from dspark_json.parse.backend import make_parser, select_backend

__all__ = ["make_parser", "select_backend"]
