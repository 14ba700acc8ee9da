"""Tables of examples from CSV, TSV and JSONL files: what fine-tuning reads and prediction writes back.

The format comes from the file extension (`.csv`, `.tsv`/`.tab`, `.jsonl`/`.ndjson`) unless given. A column
is named or a 0-based index:

- names: CSV/TSV files whose first row is a header; JSONL lines that are objects;
- indexes: CSV/TSV files with no header row (every row is data); JSONL lines that are arrays.

TSV follows GLUE's convention (google-research/bert `run_classifier.py`, `csv.reader(delimiter="\\t",
quotechar=None)`): fields are separated by tabs and never quoted, so a `"` inside a sentence is text. CSV uses
standard quoting. Files are decoded as UTF-8 (a leading byte-order mark is dropped) unless an encoding is
given. Problems a user can fix (a missing file or column, an undecodable byte, an empty cell) raise
NanobertError naming the file and line.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from nanobert.errors import NanobertError
from nanobert.files import atomic_file

FORMATS = ("csv", "tsv", "jsonl")
_EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl"}

Column = str | int  # a header name / object key, or a 0-based index


def parse_column(spec: str | int) -> Column:
    """A command-line column: digits are a 0-based index, anything else a name."""
    if isinstance(spec, int):
        return spec
    return int(spec) if spec.strip().isdigit() else spec


def detect_format(path: str | Path, fmt: str | None = None) -> str:
    """`fmt` when given, else the format its extension names; NanobertError when neither says."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise NanobertError(f"unknown format {fmt!r}; use one of: {', '.join(FORMATS)}")
        return fmt
    suffix = Path(path).suffix.lower()
    if suffix not in _EXTENSIONS:
        raise NanobertError(
            f"cannot tell the format of {path} from its extension {suffix or '(none)'!r}; "
            f"pass --format {'|'.join(FORMATS)}"
        )
    return _EXTENSIONS[suffix]


@dataclass
class Table:
    """The rows of one file, as read. `header` is None for headerless CSV/TSV and for JSONL."""

    path: Path
    format: str
    header: list[str] | None
    rows: list[Any]  # list[str] for CSV/TSV; dict or list for JSONL
    line_numbers: list[int]  # 1-based line of each row in the file, for error messages

    def __len__(self) -> int:
        return len(self.rows)

    def describe_columns(self) -> str:
        """What columns exist, for 'no such column' messages."""
        if self.header is not None:
            return "its columns are: " + ", ".join(repr(h) for h in self.header)
        first = self.rows[0]
        if isinstance(first, dict):
            return "its keys are: " + ", ".join(repr(k) for k in first)
        return f"its rows have {len(first)} fields (0-based indexes 0..{len(first) - 1})"

    def check_new_columns(self, names: list[str]) -> None:
        """Before predictions are added as columns `names`: they must not overwrite or repeat the file's own,
        and no row may be longer than the header (its new cells would land under the wrong names)."""
        taken = set(self.header or [])
        if self.format == "jsonl":
            taken = {key for row in self.rows if isinstance(row, dict) for key in row}
        clash = [name for name in names if name in taken]
        if clash:
            raise NanobertError(
                f"{self.path} already has a column {clash[0]!r}, which the predictions would take; rename it"
            )
        if self.header is not None:
            for row, line in zip(self.rows, self.line_numbers, strict=True):
                if len(row) > len(self.header):
                    raise NanobertError(
                        f"line {line} of {self.path} has {len(row)} cells, more than its header's "
                        f"{len(self.header)}; predictions would land under the wrong column names"
                    )

    def column(self, col: Column, *, required: bool = True) -> list[Any] | None:
        """The values of one column, in row order; None if it is absent and not `required`.

        A name needs a header (or JSONL objects), an index a headerless file (or JSONL arrays).
        Missing cells (a short row, a key absent from one object) are None.
        """
        if self.format == "jsonl":
            return self._json_column(col, required)
        if isinstance(col, int):
            if self.header is not None:
                raise NanobertError(f"column {col} is an index, but {self.path} was read with a header row")
            if not any(col < len(row) for row in self.rows):
                if not required:
                    return None
                raise NanobertError(f"{self.path} has no column {col}; {self.describe_columns()}")
            return [row[col] if col < len(row) else None for row in self.rows]
        if self.header is None:
            raise NanobertError(f"column {col!r} is a name, but {self.path} has no header row")
        if col not in self.header:
            if not required:
                return None
            raise NanobertError(f"{self.path} has no column {col!r}; {self.describe_columns()}")
        i = self.header.index(col)
        return [row[i] if i < len(row) else None for row in self.rows]

    def _json_column(self, col: Column, required: bool) -> list[Any] | None:
        want = list if isinstance(col, int) else dict
        for row, line in zip(self.rows, self.line_numbers, strict=True):
            if not isinstance(row, want):
                kind = "a 0-based index" if isinstance(col, int) else "a key"
                shape = "arrays" if want is list else "objects"
                raise NanobertError(
                    f"line {line} of {self.path} is a JSON {type(row).__name__}; column {col!r} is {kind}, "
                    f"which needs every line to hold JSON {shape}"
                )
        if isinstance(col, int):
            present = any(col < len(row) for row in self.rows)
            values = [row[col] if col < len(row) else None for row in self.rows]
        else:
            present = any(col in row for row in self.rows)
            values = [row.get(col) for row in self.rows]
        if not present:
            if not required:
                return None
            raise NanobertError(f"{self.path} has no column {col!r}; {self.describe_columns()}")
        return values


def _decode(path: Path, encoding: str | None) -> str:
    if not path.exists():
        raise NanobertError(f"{path} does not exist")
    if not path.is_file():
        raise NanobertError(f"{path} is not a file")
    data = path.read_bytes()
    try:
        return data.decode(encoding or "utf-8-sig")
    except LookupError:
        raise NanobertError(
            f"unknown encoding {encoding!r}; pass a Python codec name such as latin-1"
        ) from None
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise NanobertError(
            f"{path} is not valid {encoding or 'UTF-8'} (line {line}, byte 0x{data[e.start]:02x}); "
            "pass --encoding with the file's encoding, e.g. --encoding latin-1"
        ) from None


def read_table(
    path: str | Path, fmt: str | None = None, encoding: str | None = None, header: bool = True
) -> Table:
    """Read a CSV, TSV or JSONL file. `header=False` reads every CSV/TSV row as data (ignored for JSONL).

    Blank lines are skipped. Raises NanobertError for a missing, undecodable or empty file and for a line
    that is not JSON.
    """
    path = Path(path)
    fmt = detect_format(path, fmt)
    text = _decode(path, encoding)
    rows: list[Any] = []
    lines: list[int] = []
    names = None
    if fmt == "jsonl":
        # JSON Lines ends records at "\n" only: JSON strings may hold U+2028, U+0085 and the like raw,
        # which str.splitlines() would also split at.
        for n, line in enumerate(text.split("\n"), start=1):
            line = line.removesuffix("\r")
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise NanobertError(
                    f"line {n} of {path} is not JSON ({e.msg}); expected one JSON value a line"
                ) from None
            lines.append(n)
    else:
        # csv's default cap on a cell (131,072 characters) is no limit of ours: the encoder cuts long texts.
        csv.field_size_limit(max(csv.field_size_limit(), len(text)))
        if fmt == "tsv":
            reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
        else:
            # strict: a quote left open is an error, not a cell that swallows the rest of the file
            reader = csv.reader(io.StringIO(text, newline=""), strict=True)
        start = 1
        try:
            for row in reader:
                if row and any(cell.strip() for cell in row):
                    if header and names is None:
                        names = [cell.strip() for cell in row]
                    else:
                        rows.append(row)
                        lines.append(start)
                start = reader.line_num + 1
        except csv.Error as e:
            raise NanobertError(
                f"line {reader.line_num} of {path} is not valid {fmt.upper()} ({e})"
            ) from None
    if not rows:
        what = "a header but no rows" if names is not None else "no rows"
        raise NanobertError(f"{path} is empty: it has {what}")
    return Table(path, fmt, names, rows, lines)


def write_table(table: Table, new_columns: dict[str, list[Any]], out: str | Path | TextIO | None) -> None:
    """Write `table` back in its own format with `new_columns` appended to every row.

    CSV/TSV: the new names join the header (no header for a headerless table; values keep the order of
    `new_columns`). JSONL: objects gain the keys, arrays the values. `out` is a path, an open text stream,
    or None for stdout.
    """
    names = list(new_columns)
    columns = [new_columns[name] for name in names]

    def extra(i: int) -> list[Any]:
        return [col[i] for col in columns]

    def emit(f: TextIO) -> None:
        if table.format == "jsonl":
            for i, row in enumerate(table.rows):
                if isinstance(row, dict):
                    row = {**row, **dict(zip(names, extra(i), strict=True))}
                else:
                    row = [*row, *extra(i)]
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
            return
        if table.format == "tsv":
            # Cells as read: TSV has no quoting (GLUE's convention), so a quote or backslash is plain text
            # and must not be escaped; a cell read from TSV holds no tab or newline.
            def write_row(cells: list[Any]) -> None:
                f.write("\t".join(map(str, cells)) + "\n")

        else:
            write_row = csv.writer(f, lineterminator="\n").writerow
        # short rows padded to the header (or the widest row), so every new cell sits under its name
        width = len(table.header) if table.header is not None else max(len(row) for row in table.rows)
        if table.header is not None:
            write_row([*table.header, *names])
        for i, row in enumerate(table.rows):
            write_row([*row, *[""] * (width - len(row)), *extra(i)])

    if out is None:
        emit(sys.stdout)
    elif isinstance(out, (str, Path)):
        with atomic_file(out, "w", encoding="utf-8", newline="") as f:  # a failed write keeps the old file
            emit(f)
    else:
        emit(out)


__all__ = ["FORMATS", "Column", "Table", "detect_format", "parse_column", "read_table", "write_table"]
