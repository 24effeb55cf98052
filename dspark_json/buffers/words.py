"""Eight and sixty-four bytes at a time: the word and block loads, stores and masks the byte
scans use to pass over runs of plain bytes.

A scan that looks at one byte per step spends about a nanosecond a byte; most of a response is
runs that need no decision (the text of a string between its escapes, the bytes of a shape's
static segments), and a word of eight answers "is any byte here special?" in a few operations.
Each mask below has, for each byte of a word, its high bit set where that byte is of the kind
asked. A set bit may also follow a real one (a borrow carries into the next byte), never
precede it: the *lowest* set bit is exact, which is all a scan reads (:func:`first_byte`).

A *block* is 64 bytes compared at once by LLVM vector instructions (SIMD: AVX2 or AVX-512 on
x86, NEON on ARM; LLVM picks for the machine), each answer a ``uint64`` with bit ``i`` set where
byte ``i`` is of the kind asked: exact for every byte, so a scan can resolve a whole block's
escapes with arithmetic (:func:`escaped_bytes`) instead of a branch per escape. A JSON string
with a ``\\"`` every eleven bytes (a model's JSON inside the envelope's content) costs a
mispredicted branch per escape in a byte or word loop, and a few instructions in a block.

A *prefetch* (:data:`prefetch`) asks the CPU for a cache line before a scan reads it: a scan
over rows asks for the next row's lines while it walks this one, so that the walk does not
wait on memory where a row starts a page the CPU's own prefetcher has not reached.

The loads and stores are unaligned, little-endian, and not bounds-checked: the caller keeps
``pos + 8 <= len(array)`` for a word, ``pos + 64 <= len(array)`` for a block. They are LLVM
instructions (numba intrinsics): compiled code only, for the CPU (a GPU scan would need its own).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np
from llvmlite import binding, ir
from numba import types
from numba.core import cgutils, config
from numba.extending import intrinsic

from dspark_json.buffers.bytes import BACKSLASH, LOWER_U, QUOTE
from dspark_json.buffers.compiled import leaf

__all__ = [
    "BLOCK",
    "COMPRESSES",
    "WORD",
    "backslashes",
    "block_below",
    "block_equal",
    "block_high",
    "block_unequal",
    "bytes_equal",
    "compress_block",
    "copy_block",
    "escaped_bytes",
    "escaping_backslashes",
    "first_byte",
    "leading_zeros",
    "load_word",
    "lowest_bit",
    "prefetch",
    "store_word",
    "string_stops",
    "unicode_escapes",
]

#: Bytes in a word.
WORD = 8
#: Bytes in a block.
BLOCK = 64

_ONES = np.uint64(0x0101010101010101)
_HIGH = np.uint64(0x8080808080808080)
_SPACES = np.uint64(0x2020202020202020)


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


def _zeros_counted(word: Any, leading: bool) -> Any:
    """The signature and code of LLVM's count of trailing (or leading) zero bits of a
    ``uint64`` (64 for 0); None for other types."""
    if word != types.uint64:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        count = builder.ctlz if leading else builder.cttz
        return count(args[0], ir.Constant(ir.IntType(1), 0))

    return types.int64(word), codegen


@intrinsic
def _trailing_zeros_of(typingctx: Any, word: Any) -> Any:
    return _zeros_counted(word, leading=False)


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
    return bytes_equal(word, BACKSLASH)


@leaf
def unicode_escapes(word: np.uint64) -> np.uint64:
    """The mask of the backslashes of ``word`` followed by a ``u`` in it (bytes 0-6; a scan
    steps seven bytes to see a pair across words). Its lowest bit may be a false hit, never
    past a real one: the caller checks the bytes."""
    return backslashes(word) & (bytes_equal(word, LOWER_U) >> np.uint64(8))


@leaf
def string_stops(word: np.uint64, lenient: bool) -> np.uint64:
    """The mask of the bytes a string scan must look at: a quote, a backslash, a byte of 0x80
    or above (UTF-8 to check), and, unless ``lenient``, a control character (below 0x20)."""
    stops = bytes_equal(word, QUOTE) | backslashes(word) | (word & _HIGH)
    if not lenient:
        stops |= (word - _SPACES) & ~word & _HIGH
    return stops


# Sixty-four bytes at a time.

_BLOCK_TYPE = ir.VectorType(ir.IntType(8), BLOCK)
_MASK_TYPE = ir.IntType(64)
_EVEN = np.uint64(0x5555555555555555)
_ODD = np.uint64(0xAAAAAAAAAAAAAAAA)


def _block_pointer(context: Any, builder: Any, array_type: Any, array: Any, pos: Any) -> Any:
    data = context.make_array(array_type)(context, builder, array)
    at = context.cast(builder, pos, types.intp, types.intp)
    return builder.bitcast(builder.gep(data.data, [at]), _BLOCK_TYPE.as_pointer())


def _load_block(context: Any, builder: Any, signature: Any, args: Any) -> Any:
    at = context.cast(builder, args[1], signature.args[1], types.intp)
    return builder.load(_block_pointer(context, builder, signature.args[0], args[0], at), align=1)


def _splat(context: Any, builder: Any, value: Any, value_type: Any) -> Any:
    """A block of 64 copies of the byte ``value``."""
    byte = builder.trunc(context.cast(builder, value, value_type, types.int64), ir.IntType(8))
    one = builder.insert_element(ir.Constant(_BLOCK_TYPE, ir.Undefined), byte, ir.IntType(32)(0))
    every = ir.Constant(ir.VectorType(ir.IntType(32), BLOCK), [0] * BLOCK)
    return builder.shuffle_vector(one, ir.Constant(_BLOCK_TYPE, ir.Undefined), every)


def _compared(array: Any, pos: Any, byte: Any, operator: str) -> Any:
    """The signature and code of ``array[pos:pos + 64] <operator> byte``, byte by byte
    (unsigned), as a mask; None where the types do not fit."""
    if not (_contiguous_bytes(array) and isinstance(pos, types.Integer)):
        return None
    if not isinstance(byte, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        block = _load_block(context, builder, signature, args)
        splat = _splat(context, builder, args[2], signature.args[2])
        return builder.bitcast(builder.icmp_unsigned(operator, block, splat), _MASK_TYPE)

    return types.uint64(array, pos, byte), codegen


@intrinsic
def _block_equal(typingctx: Any, array: Any, pos: Any, byte: Any) -> Any:
    return _compared(array, pos, byte, "==")


@intrinsic
def _block_below(typingctx: Any, array: Any, pos: Any, byte: Any) -> Any:
    return _compared(array, pos, byte, "<")


@intrinsic
def _block_high(typingctx: Any, array: Any, pos: Any) -> Any:
    if not (_contiguous_bytes(array) and isinstance(pos, types.Integer)):
        return None
    sig = types.uint64(array, pos)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        block = _load_block(context, builder, signature, args)
        zero = ir.Constant(_BLOCK_TYPE, [0] * BLOCK)
        return builder.bitcast(builder.icmp_signed("<", block, zero), _MASK_TYPE)

    return sig, codegen


@intrinsic
def _block_unequal(typingctx: Any, x: Any, a: Any, y: Any, b: Any) -> Any:
    if not (_contiguous_bytes(x) and _contiguous_bytes(y)):
        return None
    if not (isinstance(a, types.Integer) and isinstance(b, types.Integer)):
        return None
    sig = types.uint64(x, a, y, b)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        blocks = []
        for k in (0, 2):  # (x, a), then (y, b)
            at = context.cast(builder, args[k + 1], signature.args[k + 1], types.intp)
            pointer = _block_pointer(context, builder, signature.args[k], args[k], at)
            blocks.append(builder.load(pointer, align=1))
        return builder.bitcast(builder.icmp_unsigned("!=", blocks[0], blocks[1]), _MASK_TYPE)

    return sig, codegen


@intrinsic
def _prefetch(typingctx: Any, array: Any, pos: Any) -> Any:
    if not (_contiguous_bytes(array) and isinstance(pos, types.Integer)):
        return None
    sig = types.void(array, pos)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        data = context.make_array(signature.args[0])(context, builder, args[0])
        at = context.cast(builder, args[1], signature.args[1], types.intp)
        pointer = builder.gep(data.data, [at])
        i32 = ir.IntType(32)
        function = cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
            builder.module,
            ir.FunctionType(ir.VoidType(), [pointer.type, i32, i32, i32]),
            "llvm.prefetch.p0",
        )
        builder.call(function, [pointer, i32(0), i32(3), i32(1)])  # read, keep, data
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _copy_block(typingctx: Any, source: Any, pos: Any, target: Any, at: Any) -> Any:
    if not (_contiguous_bytes(source) and _contiguous_bytes(target)):
        return None
    if not (isinstance(pos, types.Integer) and isinstance(at, types.Integer)):
        return None
    sig = types.void(source, pos, target, at)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        src, read_at, dst, write_at = args
        read = context.cast(builder, read_at, signature.args[1], types.intp)
        write = context.cast(builder, write_at, signature.args[3], types.intp)
        block = builder.load(
            _block_pointer(context, builder, signature.args[0], src, read), align=1
        )
        builder.store(
            block, _block_pointer(context, builder, signature.args[2], dst, write), align=1
        )
        return context.get_dummy_value()

    return sig, codegen


def _compresses() -> bool:
    """Whether the machine code numba writes here has a byte compress (AVX-512 VBMI2's
    ``vpcompressb``): the features numba is told to compile for (``NUMBA_CPU_FEATURES``, set
    too by ``NUMBA_CPU_NAME=generic``), else this CPU's. Without one, LLVM writes
    :func:`compress_block` as 64 steps, slower than an escape at a time: the unescape uses it
    only where this is True."""
    features: str | None = getattr(config, "CPU_FEATURES", None)  # set at run time: untyped
    if features is not None:  # numba's features, as numba's code generator reads them
        return "+avx512vbmi2" in features.split(",")
    return bool(binding.get_host_cpu_features().get("avx512vbmi2", False))


#: Whether :func:`compress_block` is one instruction on the compiled code's CPU (numba's cache
#: is kept per CPU and its features, so a kernel that reads it is compiled again elsewhere).
COMPRESSES = _compresses()

_CONTROLS = tuple((ord(letter), code) for letter, code in zip("bfnrt", b"\b\f\n\r\t", strict=True))


@intrinsic
def _compress_block(  # noqa: PLR0917  (numba passes an intrinsic its arguments by position)
    typingctx: Any, source: Any, pos: Any, target: Any, at: Any, keep: Any, letters: Any
) -> Any:
    if not (_contiguous_bytes(source) and _contiguous_bytes(target)):
        return None
    if not all(isinstance(t, types.Integer) for t in (pos, at, keep, letters)):
        return None
    sig = types.int64(source, pos, target, at, keep, letters)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        src, read_at, dst, write_at, kept, named = args
        read = context.cast(builder, read_at, signature.args[1], types.intp)
        write = context.cast(builder, write_at, signature.args[3], types.intp)
        block = builder.load(
            _block_pointer(context, builder, signature.args[0], src, read), align=1
        )
        bits = ir.VectorType(ir.IntType(1), BLOCK)
        named_bits = builder.bitcast(
            context.cast(builder, named, signature.args[5], types.uint64), bits
        )
        for letter, code in _CONTROLS:  # an escaped b, f, n, r or t: its control character
            letter_block = ir.Constant(_BLOCK_TYPE, [letter] * BLOCK)
            at_letter = builder.and_(named_bits, builder.icmp_unsigned("==", block, letter_block))
            block = builder.select(at_letter, ir.Constant(_BLOCK_TYPE, [code] * BLOCK), block)
        kept_mask = context.cast(builder, kept, signature.args[4], types.uint64)
        target_data = context.make_array(signature.args[2])(context, builder, dst).data
        pointer = builder.gep(target_data, [write])
        store = cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
            builder.module,
            ir.FunctionType(ir.VoidType(), [_BLOCK_TYPE, pointer.type, bits]),
            "llvm.masked.compressstore.v64i8",
        )
        builder.call(store, [block, pointer, builder.bitcast(kept_mask, bits)])
        return builder.ctpop(kept_mask)

    return sig, codegen


@intrinsic
def _leading_zeros_of(typingctx: Any, word: Any) -> Any:
    return _zeros_counted(word, leading=True)


#: ``block_equal(array, pos, byte)``: bit ``i`` set where ``array[pos + i] == byte``.
block_equal = cast(Callable[[Any, int, int], Any], _block_equal)
#: ``block_below(array, pos, byte)``: bit ``i`` set where ``array[pos + i] < byte``.
block_below = cast(Callable[[Any, int, int], Any], _block_below)
#: ``block_high(array, pos)``: bit ``i`` set where ``array[pos + i] >= 0x80`` (not ASCII).
block_high = cast(Callable[[Any, int], Any], _block_high)
#: ``block_unequal(x, a, y, b)``: bit ``i`` set where ``x[a + i] != y[b + i]``.
block_unequal = cast(Callable[[Any, int, Any, int], Any], _block_unequal)
#: ``prefetch(array, pos)``: ask the CPU to bring the cache line of ``array[pos]`` in (a hint:
#: nothing is read, and a position past the array's end is harmless).
prefetch = cast(Callable[[Any, int], None], _prefetch)
#: ``copy_block(source, pos, target, at)``: ``target[at:at + 64] = source[pos:pos + 64]``.
copy_block = cast(Callable[[Any, int, Any, int], None], _copy_block)
#: ``compress_block(source, pos, target, at, keep, letters)``: the bytes of
#: ``source[pos:pos + 64]`` whose bits are set in ``keep``, in order, written from
#: ``target[at]`` on (nothing past them), each one marked in ``letters`` that is ``b``, ``f``,
#: ``n``, ``r`` or ``t`` written as the control character its JSON escape stands for; how many
#: were written. One instruction where :data:`COMPRESSES`, else 64 steps.
compress_block = cast(Callable[[Any, int, Any, int, Any, Any], int], _compress_block)
#: ``leading_zeros(mask)``: the zero bits above the highest set bit of a ``uint64`` (64 for 0).
leading_zeros = cast(Callable[[Any], int], _leading_zeros_of)


@leaf
def lowest_bit(mask: np.uint64) -> int:
    """The index of the lowest set bit of ``mask`` (0-63), 64 where none is."""
    return _trailing_zeros(mask)


@leaf
def escaped_bytes(backslashes: np.uint64) -> np.uint64:
    """The bytes a run of backslashes of odd length escapes (a JSON string's escaped
    characters), from the block's backslash mask; the block starts outside an escape, and a run
    that reaches its last byte escapes nothing in it (the caller starts the next block there).

    simdjson's carry trick: adding a run's lowest bit to the run carries past its end; where a
    run starting at an even bit ends at an odd one, or the other way round, its length is odd.
    """
    starts = backslashes & ~(backslashes << np.uint64(1))
    even_ends = (backslashes + (starts & _EVEN)) & ~backslashes
    odd_ends = (backslashes + (starts & _ODD)) & ~backslashes
    return (even_ends & _ODD) | (odd_ends & _EVEN)


@leaf
def escaping_backslashes(backslashes: np.uint64) -> np.uint64:
    """The backslashes that escape the byte after them (the first of each pair in a run:
    ``\\\\`` is one escape, of a backslash), from the block's backslash mask; the block
    starts outside an escape, and no run reaches its last byte (the caller looks at that
    block otherwise). Each one's byte, the one after it, is the escaped character."""
    starts = backslashes & ~(backslashes << np.uint64(1))
    # Adding a run's lowest bit carries through the run: the runs that start at an even bit.
    from_even = backslashes & ~(backslashes + (starts & _EVEN))
    return (from_even & _EVEN) | (backslashes & ~from_even & _ODD)
