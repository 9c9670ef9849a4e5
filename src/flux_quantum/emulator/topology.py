"""How an emulated device's qubits are coupled: the maps its backend publishes and checks.

This module owns the coupling maps the emulator's devices have, as undirected pairs of
qubit indices (0-based): IBM's heavy-hex lattices (``heavy_hex``: rows of qubits joined
by bridge qubits, four per gap, on alternating columns; 156 qubits as Heron r2's eight
rows of 16, 133 as Heron r1's seven rows of 15 and a last bridge row, 127 as Eagle's
seven rows of 15 without the first row's last qubit and the last row's first), IQM
Garnet's 20-qubit square lattice as IQM publishes it (``GARNET``), a square lattice of
any size (``square``: IQM's Crystal layouts), and a line (``line``: any other size). It
must never hold state or know a vendor's documents.
"""

from __future__ import annotations

import math

Pair = tuple[int, int]

# IQM Garnet's couplers (QB1..QB20 as 0..19), as its dynamic quantum architecture lists
# its cz loci.
GARNET: tuple[Pair, ...] = tuple(
    (a - 1, b - 1)
    for a, b in (
        (1, 2), (1, 4), (2, 5), (3, 4), (3, 8), (4, 5), (4, 9), (5, 6), (5, 10), (6, 7),
        (6, 11), (7, 12), (8, 9), (8, 13), (9, 10), (9, 14), (10, 11), (10, 15), (11, 12),
        (11, 16), (12, 17), (13, 14), (14, 15), (14, 18), (15, 16), (15, 19), (16, 17),
        (16, 20), (18, 19), (19, 20),
    )
)  # fmt: skip
# Heavy-hex layouts by size: (rows, qubits per row, column of the first gap's bridges,
# whether a bridge row hangs below the last row, qubits left out).
_HEAVY_HEX = {156: (8, 16, 3, False, ()), 133: (7, 15, 0, True, ()),
              127: (7, 15, 0, False, ("first-row-last", "last-row-first"))}  # fmt: skip


def line(qubits: int) -> list[Pair]:
    """Qubit i coupled to i + 1."""
    return [(q, q + 1) for q in range(qubits - 1)]


def square(qubits: int) -> list[Pair]:
    """A square lattice of rows as wide as the square root: each qubit coupled to its
    right and lower neighbours."""
    side = max(1, math.isqrt(qubits - 1) + 1) if qubits > 1 else 1
    pairs = []
    for q in range(qubits):
        if (q + 1) % side and q + 1 < qubits:
            pairs.append((q, q + 1))
        if q + side < qubits:
            pairs.append((q, q + side))
    return pairs


def heavy_hex(qubits: int) -> list[Pair] | None:
    """IBM's heavy-hex lattice of ``qubits`` (127, 133 or 156), numbered row by row with
    each gap's bridges after the row above it; None for another size."""
    layout = _HEAVY_HEX.get(qubits)
    if layout is None:
        return None
    rows, width, first, hanging, left_out = layout
    grid: dict[tuple[str, int, int], int] = {}  # (kind, row, column) -> qubit
    pairs: list[tuple[tuple[str, int, int], tuple[str, int, int]]] = []
    skip = set()
    if "first-row-last" in left_out:
        skip.add(("row", 0, width - 1))
    if "last-row-first" in left_out:
        skip.add(("row", rows - 1, 0))
    gaps = rows if hanging else rows - 1
    order: list[tuple[str, int, int]] = []
    for r in range(rows):
        order.extend(("row", r, c) for c in range(width) if ("row", r, c) not in skip)
        if r < gaps:
            columns = [c for c in range(width) if c % 4 == (first + 2 * (r % 2)) % 4]
            order.extend(("bridge", r, c) for c in columns)
    for place in order:
        grid[place] = len(grid)
    for kind, r, c in order:
        if kind == "row" and ("row", r, c + 1) in grid:
            pairs.append(((kind, r, c), ("row", r, c + 1)))
        if kind == "bridge":
            pairs.append((("row", r, c), (kind, r, c)))
            if ("row", r + 1, c) in grid:
                pairs.append(((kind, r, c), ("row", r + 1, c)))
    return [(grid[a], grid[b]) for a, b in pairs if a in grid and b in grid]


def ibm(qubits: int, given: tuple[Pair, ...] = ()) -> tuple[Pair, ...]:
    """An IBM backend's coupled pairs: ``given`` (its scenario's ``coupling_map``), else
    IBM's heavy-hex lattice of its size (127, 133, 156 qubits), else a line."""
    return given or tuple(heavy_hex(qubits) or line(qubits))


def both_ways(pairs: list[Pair] | tuple[Pair, ...]) -> list[list[int]]:
    """Each pair in both directions, as a backend's ``coupling_map`` lists it."""
    return [list(p) for a, b in pairs for p in ((a, b), (b, a))]
