"""dspark-json's JSON library: numba scans over Arrow string buffers that check JSON (RFC 8259,
strict), fit it to a Spark type, shred it into events and decode those into Arrow arrays, with
no Python object per row. This face is what the rest of the package uses; its modules are its
own (``tests/test_layers.py`` holds every other module of the package to this face).

The modules, bottom-up:

- below it, :mod:`dspark_json.buffers`: how a kernel is compiled (``kernel``, ``leaf``), the
  bytes by name, and a word of eight bytes and a block of 64 at a time (CPU instructions), which
  the inputs' line splitting uses too;
- :mod:`.grammar`: JSON token by token (strings, numbers, literals, whitespace, escapes);
- :mod:`.candidates`: the content rule's candidates (a fence, the outermost braces);
- :mod:`.lines`: rows copied into JSON lines for a reader;
- :mod:`.conform`: a Spark type as a type table, and one document checked against it;
- :mod:`.shapes`: a document that repeats the shape of one before it, matched byte for byte;
- :mod:`.scans`: the scans over a batch (the envelope's, the content's);
- :mod:`.decode`: the scans' events as Arrow arrays;
- :mod:`.times`: timestamps and dates read from text;
- :mod:`.rescue`: the keys a type does not hold, found and rendered for ``_rescued_data``.

What a scan says of each document (fits, fits with keys to rescue, misfit, invalid, null, no
candidate) is ``scan_codes.CODE_*``: the face gives the namespace, not a list of names to repeat.
"""

from __future__ import annotations

from dspark_json.parse.json import conform as scan_codes
from dspark_json.parse.json.conform import (
    NESTED_PATH,
    NESTED_STRIDE,
    T_STRUCT,
    TypeNodes,
    TypeTable,
    compile_type,
    extract_row,
    validate_row,
)
from dspark_json.parse.json.decode import Workspace, read_events
from dspark_json.parse.json.grammar import (
    KIND_INVALID,
    KIND_NONE,
    MAX_DEPTH,
    holds_bytes,
    holds_escape,
)
from dspark_json.parse.json.lines import gather_lines, line_lengths
from dspark_json.parse.json.rescue import (
    RescueEntries,
    json_texts,
    rescue_entries,
    rescued_keys,
)
from dspark_json.parse.json.scans import (
    NO_SPARE,
    ContentScan,
    EnvelopeScan,
    scan_content_fit,
    scan_envelope_fit,
    spare_events,
    widest_value,
)
from dspark_json.parse.json.times import scan_dates, scan_timestamps

__all__ = [
    "KIND_INVALID",
    "KIND_NONE",
    "MAX_DEPTH",
    "NESTED_PATH",
    "NESTED_STRIDE",
    "NO_SPARE",
    "T_STRUCT",
    "ContentScan",
    "EnvelopeScan",
    "RescueEntries",
    "TypeNodes",
    "TypeTable",
    "Workspace",
    "compile_type",
    "extract_row",
    "gather_lines",
    "holds_bytes",
    "holds_escape",
    "json_texts",
    "line_lengths",
    "read_events",
    "rescue_entries",
    "rescued_keys",
    "scan_codes",
    "scan_content_fit",
    "scan_dates",
    "scan_envelope_fit",
    "scan_timestamps",
    "spare_events",
    "validate_row",
    "widest_value",
]
