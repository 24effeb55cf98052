"""How each row of a batch on the vectorised path turned out: its status as a small code,
computed column-wise (:data:`STATUSES` names them), and whether it was set aside for the
reference parser, and why (:class:`SetAside`)."""

from __future__ import annotations

import numpy as np

from dspark_json.parse.parser import Reason
from dspark_json.rows import Status

__all__ = [
    "NO_STATUS",
    "STATUSES",
    "STATUS_CORRUPT_CONTENT",
    "STATUS_CORRUPT_ENVELOPE",
    "STATUS_EMPTY",
    "STATUS_NOT_JSON",
    "STATUS_OK",
    "STATUS_TRUNCATED",
    "SetAside",
]

#: The statuses by code (``None``: a null body, no status).
STATUSES = (
    Status.OK,
    Status.EMPTY,
    Status.NOT_JSON,
    Status.CORRUPT_CONTENT,
    Status.TRUNCATED,
    Status.CORRUPT_ENVELOPE,
    None,
)
(
    STATUS_OK,
    STATUS_EMPTY,
    STATUS_NOT_JSON,
    STATUS_CORRUPT_CONTENT,
    STATUS_TRUNCATED,
    STATUS_CORRUPT_ENVELOPE,
    NO_STATUS,
) = range(7)


class SetAside:
    """The rows of a batch set aside for the reference parser, by :class:`Reason`: a row's
    reason is the first one it was set aside for (in the order of the path: the envelope's
    scan, the reader, the values read, the contents)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._rows: dict[Reason, set[int]] = {}

    def of(self, reason: Reason) -> set[int]:
        """The set of rows set aside for ``reason`` (to add to)."""
        return self._rows.setdefault(reason, set())

    def add(self, reason: Reason, rows: np.ndarray) -> None:
        """Set aside the rows where the mask ``rows`` holds."""
        self.of(reason).update(np.flatnonzero(rows).tolist())

    def rows(self) -> np.ndarray:
        """Whether each row is set aside, for any reason."""
        mask = np.zeros(self.n, np.bool_)
        for rows in self._rows.values():
            mask[list(rows)] = True
        return mask

    def counts(self) -> dict[str, int]:
        """Rows per reason, each row counted once, under its first reason."""
        taken: set[int] = set()
        counts: dict[str, int] = {}
        for reason, rows in self._rows.items():
            new = rows - taken
            if new:
                counts[str(reason)] = len(new)
                taken |= new
        return counts
