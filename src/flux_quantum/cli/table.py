"""Output the Flux way for every ``flux quantum`` listing: ``-o FORMAT`` and ``-n``.

A listing is rows of named string fields. ``render`` checks a Python format string's
field names against the listing's (one sentence naming the unknown field and the
accepted ones), prints the header (each field's name in upper case, or the listing's own
headers) and the rows; ``auto_format`` sizes the default columns to their content, with
an optional last column left unpadded (a reason, a path). Also the one way a command
loads the catalog. It only formats: it never calls Flux or a vendor.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping, Sequence

from flux_quantum.catalog import Catalog, CatalogError, load_catalog
from flux_quantum.errors import CommandError


def auto_format(
    rows: Iterable[Mapping[str, str]],
    fields: Sequence[str],
    right_aligned: Iterable[str] = (),
    last: str | None = None,
) -> str:
    """Columns sized to their content; ``last`` follows two spaces, unpadded."""
    rows = list(rows)
    right = set(right_aligned)
    parts = []
    for field in fields:
        width = max([len(field)] + [len(row[field]) for row in rows])
        parts.append(f"{{{field}:{'>' if field in right else '<'}{width}}}")
    return " ".join(parts) + (f"  {{{last}}}" if last else "")


def render(
    rows: Iterable[Mapping[str, str]],
    fmt: str,
    fields: Sequence[str],
    *,
    header: bool = True,
    headers: Mapping[str, str] | None = None,
) -> list[str]:
    """The lines of a listing: the header (unless ``header`` is false), then a line a
    row. A bad format or an unknown field is a CommandError naming it."""
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(fmt) if name is not None]
    except ValueError as exc:
        raise CommandError(f"invalid --format {fmt!r}: {exc}") from None
    for name in names:
        if name not in fields:
            raise CommandError(
                f"--format: unknown field '{{{name}}}' (accepted: {', '.join(fields)})"
            )
    titles = {field: (headers or {}).get(field, field.upper()) for field in fields}
    try:
        lines = [fmt.format(**titles).rstrip()] if header else []
        lines += [fmt.format(**row).rstrip() for row in rows]
    except (ValueError, IndexError, KeyError) as exc:
        raise CommandError(f"invalid --format {fmt!r}: {exc}") from None
    return lines


def catalog(path: str | None) -> Catalog:
    """The catalog at ``path`` (or by the lookup order), or a CommandError saying why."""
    try:
        return load_catalog(path)
    except CatalogError as exc:
        raise CommandError(str(exc)) from None
