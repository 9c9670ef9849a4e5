"""flux-accounting's bank tree: every bank with its parent, as its ``bank_table`` holds
them (``parent_bank``; the root's is empty).

This module owns only the tree's shape and the questions asked of it (is a bank there,
which banks lie under one). It never reads a database: ``AccountingDatabase`` builds it
from one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class BankTree:
    """Banks by name, each with its parent's name ("" for the root)."""

    parents: Mapping[str, str] = field(default_factory=dict)

    def __contains__(self, bank: object) -> bool:
        return bank in self.parents

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.parents))

    def __len__(self) -> int:
        return len(self.parents)

    def children(self, bank: str) -> list[str]:
        return sorted(name for name, parent in self.parents.items() if parent == bank)

    def covered(self, bank: str) -> frozenset[str]:
        """``bank`` and every bank under it (empty when it is not in the tree)."""
        if bank not in self.parents:
            return frozenset()
        found = {bank}
        todo = [bank]
        while todo:
            for child in self.children(todo.pop()):
                if child not in found:  # a cycle in a hand-edited table ends here
                    found.add(child)
                    todo.append(child)
        return frozenset(found)

    def coverage(self) -> dict[str, frozenset[str]]:
        """Each bank and the banks it covers (itself and its sub-banks)."""
        return {bank: self.covered(bank) for bank in self.parents}

    def ancestors(self, bank: str) -> tuple[str, ...]:
        """The banks above ``bank``, its parent first, the root last."""
        chain: list[str] = []
        parent = self.parents.get(bank, "")
        while parent and parent in self.parents and parent not in chain:
            chain.append(parent)
            parent = self.parents[parent]
        return tuple(chain)
