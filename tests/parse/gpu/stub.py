"""A stand-in for cuDF's reader, in tests only: the JSON lines the device gathered, read by
pyarrow (what cuDF must give for them, as the CPU backend's reader of lines does)."""

import numpy as np

from dspark_json.parse.gpu.reader import CudfLines
from dspark_json.parse.reader import JsonLines


class PyarrowLines(CudfLines):
    """cuDF's :meth:`read_lines` replaced by pyarrow's reader."""

    def read_lines(self, lines, schema):
        chunk = np.asarray(lines.copy_to_host(), np.uint8)
        return JsonLines().read_chunk(chunk, schema)
