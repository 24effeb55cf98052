"""Eight bytes at a time: the word loads, stores and masks the byte scans use to pass over runs
of plain bytes (SWAR: SIMD within a register).

A scan that looks at one byte per step spends about a nanosecond a byte; most of a response is
runs that need no decision (the text of a string between its escapes, the bytes of a shape's
static segments), and a word of eight answers "is any byte here special?" in a few operations.
Each mask below has, for each byte of a word, its high bit set where that byte is of the kind
asked. A set bit may also follow a real one (a borrow carries into the next byte), never
precede it: the *lowest* set bit is exact, which is all a scan reads (:func:`first_byte`).

The loads and stores are unaligned, little-endian, and not bounds-checked: the caller keeps
``pos + 8 <= len(array)``. They are LLVM instructions (numba intrinsics): compiled code only,
for the CPU (a GPU scan would need its own).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from dspark_json.parse.compiled import leaf

__all__ = [
    "WORD",
    "backslashes",
    "bytes_equal",
    "first_byte",
    "load_word",
    "store_word",
    "string_stops",
    "unicode_escapes",
]

#: Bytes in a word.
WORD = 8

_ONES = np.uint64(0x0101010101010101)
_HIGH = np.uint64(0x8080808080808080)
_SPACES = np.uint64(0x2020202020202020)
_QUOTE, _BACKSLASH, _U = 0x22, 0x5C, 0x75


def _contiguous_bytes(array: Any) -> bool:
    """Whether numba's type ``array`` is a C-contiguous ``uint8`` array (byte ``i`` at
    ``data + i``)."""
    return (
        isinstance(array, types.Array)
        and array.dtype == types.uint8
        and array.ndim == 1
        and array.layout == "C"
    )


@intrinsic
def _load_word(typingctx: Any, array: Any, pos: Any) -> Any:
    """``array[pos:pos + 8]`` (a ``uint8`` array) as one little-endian ``uint64``."""
    if not _contiguous_bytes(array):
        return None
    if not isinstance(pos, types.Integer):
        return None
    sig = types.uint64(array, pos)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        data = context.make_array(signature.args[0])(context, builder, args[0])
        at = context.cast(builder, args[1], signature.args[1], types.intp)
        pointer = builder.bitcast(builder.gep(data.data, [at]), ir.IntType(64).as_pointer())
        return builder.load(pointer, align=1)

    return sig, codegen


@intrinsic
def _store_word(typingctx: Any, array: Any, pos: Any, word: Any) -> Any:
    """Write ``word`` (little-endian) to ``array[pos:pos + 8]`` (a ``uint8`` array)."""
    if not _contiguous_bytes(array):
        return None
    if not (isinstance(pos, types.Integer) and isinstance(word, types.Integer)):
        return None
    sig = types.void(array, pos, word)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        data = context.make_array(signature.args[0])(context, builder, args[0])
        at = context.cast(builder, args[1], signature.args[1], types.intp)
        value = context.cast(builder, args[2], signature.args[2], types.uint64)
        pointer = builder.bitcast(builder.gep(data.data, [at]), ir.IntType(64).as_pointer())
        builder.store(value, pointer, align=1)
        return context.get_dummy_value()

    return sig, codegen


#: ``load_word(array, pos)`` (typed for the caller: numba types the intrinsic itself).
load_word = cast(Callable[[Any, int], Any], _load_word)
#: ``store_word(array, pos, word)``.
store_word = cast(Callable[[Any, int, Any], None], _store_word)


@intrinsic
def _trailing_zeros_of(typingctx: Any, word: Any) -> Any:
    if word != types.uint64:
        return None
    sig = types.int64(word)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 0))

    return sig, codegen


_trailing_zeros = cast(Callable[[Any], int], _trailing_zeros_of)


@leaf
def first_byte(mask: np.uint64) -> int:
    """Which byte of a word (0-7) the lowest set bit of a non-zero ``mask`` marks."""
    return _trailing_zeros(mask) >> 3


@leaf
def _zero_bytes(word: np.uint64) -> np.uint64:
    """The high bit of each byte of ``word`` that is zero (exact up to the lowest)."""
    return (word - _ONES) & ~word & _HIGH


@leaf
def bytes_equal(word: np.uint64, byte: int) -> np.uint64:
    """The mask of the bytes of ``word`` equal to ``byte``."""
    return _zero_bytes(word ^ (_ONES * np.uint64(byte)))


@leaf
def backslashes(word: np.uint64) -> np.uint64:
    """The mask of the backslashes of ``word``."""
    return bytes_equal(word, _BACKSLASH)


@leaf
def unicode_escapes(word: np.uint64) -> np.uint64:
    """The mask of the backslashes of ``word`` followed by a ``u`` in it (bytes 0-6; a scan
    steps seven bytes to see a pair across words). Its lowest bit may be a false hit, never
    past a real one: the caller checks the bytes."""
    return backslashes(word) & (bytes_equal(word, _U) >> np.uint64(8))


@leaf
def string_stops(word: np.uint64, lenient: bool) -> np.uint64:
    """The mask of the bytes a string scan must look at: a quote, a backslash, a byte of 0x80
    or above (UTF-8 to check), and, unless ``lenient``, a control character (below 0x20)."""
    stops = bytes_equal(word, _QUOTE) | backslashes(word) | (word & _HIGH)
    if not lenient:
        stops |= (word - _SPACES) & ~word & _HIGH
    return stops
