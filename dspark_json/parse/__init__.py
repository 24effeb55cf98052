"""The parse stage: response bodies -> Arrow columns, on the CPU (numba + pyarrow) or the
GPU (cuDF), behind one seam: :func:`select_backend`, then
``make_parser(schema, backend).parse(bodies)``, a :class:`Parser`.

- :mod:`.parser` (the :class:`Parser` protocol) and :mod:`.choice` (which backend, which class);
- the backends: :mod:`.cpu`, :mod:`.gpu` (a package: the parser, cuDF's reader, room for device
  kernels) and :mod:`.reference` (row by row in Python: the rules' statement, and the rows the
  scans set aside), the first two sharing :mod:`.vectorised`;
- :mod:`.json`: the numba JSON library, used through its package face only;
- Arrow and Python helpers: :mod:`.arrow` (buffers), :mod:`.threads` (the pool),
  :mod:`.reader` (JSON lines by pyarrow), :mod:`.finish` (type finishing), :mod:`.convert`
  (Spark types as Arrow types, Python values converted), :mod:`.content` and :mod:`.rules`
  (the content rule and JSON's rules in Python), :mod:`.warmup` (compiling in the background).
"""

from dspark_json.parse.choice import make_parser, select_backend
from dspark_json.parse.parser import Parser

__all__ = ["Parser", "make_parser", "select_backend"]
