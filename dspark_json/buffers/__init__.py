"""Bytes and Arrow buffers, below every stage that reads raw bytes: how a numba kernel is
compiled (:mod:`.compiled`: ``kernel``, ``leaf``), the bytes the kernels compare against by name
(:mod:`.bytes`), eight and 64 bytes at a time (:mod:`.words`: word and block loads, masks, LLVM
vector compares) and Arrow's buffers as numpy arrays (:mod:`.arrow`). The parser's JSON library
(:mod:`dspark_json.parse.json`) and the inputs' line splitting (:mod:`dspark_json.inputs.files`)
are built on them. Nothing here knows JSON or responses.
"""
