"""Pydantic models of our own (nested, optional, enums, dates, dicts, tuples, unions, recursion)
and instances of them, shared by the Pydantic tests; import after
``pytest.importorskip("pydantic")``."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from enum import Enum, StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, Field


class Color(StrEnum):
    RED = "red"
    GREEN = "green"


class Priority(int, Enum):
    LOW = 1
    HIGH = 2


class Address(BaseModel):
    street: str
    zip: str | None = None


class Cat(BaseModel):
    kind: Literal["cat"] = "cat"
    meows: int
    indoor: bool


class Dog(BaseModel):
    kind: Literal["dog"] = "dog"
    bark_db: float
    tricks: list[str]


class Node(BaseModel):
    name: str
    weight: float | None = None
    children: list[Node] = []


class Order(BaseModel):
    id: int
    placed_at: datetime
    ship_on: date | None
    color: Color
    priority: Priority
    note: str | None = None
    address: Address
    previous: list[Address]
    counts: dict[str, int]
    prices: dict[str, float]
    by_site: dict[str, Address]
    point: tuple[float, float]
    window: tuple[datetime, datetime]
    pet: Annotated[Cat | Dog, Field(discriminator="kind")]
    either: Cat | Dog
    tree: Node


class Pair(BaseModel):
    """A tuple whose items' types differ: a struct by position."""

    pair: tuple[int, str]
    triple: tuple[str, date, bool] | None = None


T0 = datetime(2026, 3, 4, 5, 6, 7, 890000, tzinfo=UTC)
ORDERS = [
    Order(
        id=1,
        placed_at=T0,
        ship_on=date(2026, 3, 9),
        color=Color.RED,
        priority=Priority.HIGH,
        note="fragile \u2602 \u00e9",
        address=Address(street="1 Main St", zip="10001"),
        previous=[Address(street="2 Side St"), Address(street="3 Back Rd", zip="02139")],
        counts={"a": 1, "b": -2, "ü": 3},
        prices={"x": 1.5, "y": 0.0},
        by_site={"home": Address(street="4 Elm"), "work": Address(street="5 Oak", zip="1")},
        point=(1.25, -2.5),
        window=(T0, datetime(2026, 3, 5, tzinfo=UTC)),
        pet=Cat(meows=3, indoor=True),
        either=Dog(bark_db=80.5, tricks=["sit", "roll"]),
        tree=Node(
            name="root",
            weight=1.0,
            children=[
                Node(name="a", children=[Node(name="a1", weight=0.5), Node(name="a2")]),
                Node(name="b"),
            ],
        ),
    ),
    Order(
        id=2,
        placed_at=datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC),
        ship_on=None,
        color=Color.GREEN,
        priority=Priority.LOW,
        address=Address(street=""),
        previous=[],
        counts={},
        prices={"only": 3.0},
        by_site={},
        point=(0.0, 0.0),
        window=(T0, T0),
        pet=Dog(bark_db=1.0, tricks=[]),
        either=Cat(meows=0, indoor=False),
        tree=Node(name="leaf"),
    ),
]


def body(content: str) -> str:
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1767225600,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "tool_calls": []},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
        }
    )
