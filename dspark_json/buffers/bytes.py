"""The bytes the kernels compare against, by name: ASCII codes, as numba reads them (a module's
integer is a constant of the compiled code, the same machine code as the bare number)."""

from __future__ import annotations

__all__ = [
    "ASCII_END",
    "BACKSLASH",
    "BACKSPACE",
    "BACKTICK",
    "CASE_BIT",
    "COLON",
    "COMMA",
    "CONTROL_END",
    "CR",
    "DOT",
    "FORM_FEED",
    "LBRACE",
    "LBRACKET",
    "LF",
    "LOWER_A",
    "LOWER_B",
    "LOWER_E",
    "LOWER_F",
    "LOWER_L",
    "LOWER_N",
    "LOWER_R",
    "LOWER_S",
    "LOWER_T",
    "LOWER_U",
    "MINUS",
    "NINE",
    "PLUS",
    "QUOTE",
    "RBRACE",
    "RBRACKET",
    "SLASH",
    "SPACE",
    "TAB",
    "UPPER_A",
    "UPPER_E",
    "UPPER_F",
    "UPPER_T",
    "UPPER_Z",
    "ZERO",
]

# Control characters: a byte below CONTROL_END; JSON's whitespace is SPACE, TAB, LF and CR.
BACKSPACE, TAB, LF, FORM_FEED, CR = 8, 9, 10, 12, 13
CONTROL_END = 32
SPACE = 32
#: Bytes from here on are not ASCII (a UTF-8 sequence's).
ASCII_END = 128

# Punctuation.
QUOTE = 34  # "
PLUS, COMMA, MINUS, DOT, SLASH = 43, 44, 45, 46, 47  # + , - . /
COLON = 58  # :
LBRACKET, BACKSLASH, RBRACKET = 91, 92, 93  # [ \ ]
BACKTICK = 96  # `
LBRACE, RBRACE = 123, 125  # { }

# Digits and letters.
ZERO, NINE = 48, 57
UPPER_A, UPPER_E, UPPER_F, UPPER_T, UPPER_Z = 65, 69, 70, 84, 90
LOWER_A, LOWER_B, LOWER_E, LOWER_F, LOWER_L = 97, 98, 101, 102, 108
LOWER_N, LOWER_R, LOWER_S, LOWER_T, LOWER_U = 110, 114, 115, 116, 117
#: An ASCII letter with this bit set is its lower case (``c | CASE_BIT == LOWER_E``: e or E).
CASE_BIT = 32
