"""The size grammar's conformance vectors, contract/sizes.def, as the Python tests read them (libvgpu's
unit test includes the same file as C): each line ACCEPT("text", MiB) or REFUSE("text", reason)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import NamedTuple

SIZES_DEF = Path(__file__).resolve().parent / "sizes.def"
REASONS = ("form", "unit", "decimal", "below_mib", "overflow")
_LINE = re.compile(r'(ACCEPT|REFUSE)\("((?:[^"\\]|\\.)*)", (\w+)\)')


class Vector(NamedTuple):
    text: str
    mib: int | None  # None: refused
    reason: str  # why it is refused ("" when accepted)


def read(path: Path = SIZES_DEF) -> list[Vector]:
    """Every vector; a line that is neither a comment nor a vector is a ValueError naming it."""
    vectors, comment = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        if comment or stripped.startswith("/*"):
            comment = not stripped.endswith("*/")
            continue
        match = _LINE.fullmatch(stripped)
        if not match:
            if stripped:
                raise ValueError(f'{path} line {number}: not ACCEPT("text", MiB) or REFUSE("text", reason): {line}')
            continue
        kind, escaped, last = match.groups()
        # The text is a C string literal: its escapes are bytes (\xd9\xa3 is one UTF-8 character).
        text = ast.literal_eval(f'b"{escaped}"').decode("utf-8")
        if kind == "ACCEPT":
            vectors.append(Vector(text, int(last), ""))
        elif last in REASONS:
            vectors.append(Vector(text, None, last))
        else:
            raise ValueError(f"{path} line {number}: reason {last!r} is none of {REASONS}")
    return vectors


ACCEPTED = [v for v in read() if v.mib is not None]
REFUSED = [v for v in read() if v.mib is None]
