"""The parse stage: response bodies -> Arrow columns, on the CPU (numba + pyarrow) or the
GPU (cuDF), behind one seam: :func:`select_backend`, then
``make_parser(schema, backend).parse(bodies)``, a :class:`Parser`. This module is the stage's
face: nothing outside ``parse/`` imports its inner modules (``tests/test_layers.py``). Besides the
parser, it gives the inputs the batch-line scan (:func:`plain_batch_lines`) and the compiled byte
searches (:func:`holds_bytes`, :func:`holds_escape`), and the pipeline and metrics the drift
check (:func:`new_fields`).

- :mod:`.parser` (the :class:`Parser` protocol) and :mod:`.choice` (which backend, which class);
- the backends: :mod:`.cpu`, :mod:`.gpu` (a package: the parser, cuDF's reader, room for device
  kernels) and :mod:`.reference` (row by row in Python: the rules' statement, and the rows the
  scans set aside), the first two sharing :mod:`.vectorised`;
- :mod:`.json`: the numba JSON library, used through its package face only;
- helpers: :mod:`.threads` (the pool), :mod:`.reader` (JSON lines by pyarrow), :mod:`.finish`
  (type finishing), :mod:`.content` (the content rule, compiled), :mod:`.warmup` (compiling in
  the background), :mod:`.batch` (batch lines), :mod:`.drift` (new fields).

What a response is (the envelope, the content rule, JSON's rules in Python, Spark types as Arrow
types) is :mod:`dspark_json.response`'s, below this stage; bytes and Arrow buffers are
:mod:`dspark_json.buffers`'.
"""

from dspark_json.parse.batch import plain_batch_lines
from dspark_json.parse.choice import make_parser, select_backend
from dspark_json.parse.drift import new_fields
from dspark_json.parse.gpu import INSTALL_HINT
from dspark_json.parse.json import holds_bytes, holds_escape
from dspark_json.parse.parser import Parser, RescueScope

__all__ = [
    "INSTALL_HINT",
    "Parser",
    "RescueScope",
    "holds_bytes",
    "holds_escape",
    "make_parser",
    "new_fields",
    "plain_batch_lines",
    "select_backend",
]
