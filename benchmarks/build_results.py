"""Build benchmarks/RESULTS.md and README.md's "What you get" table from the records in benchmarks/records/.

Every figure on those two pages is read from a record's raw file (a CSV cell, a JSON key) at build time, so
no figure is typed twice: a record's `record.json` says which rows of which tables it feeds and where each
cell comes from (the format: benchmarks/records/README.md).

    python benchmarks/build_results.py           # rewrite RESULTS.md and the table in README.md
    python benchmarks/build_results.py --check   # exit 1, naming the page, when either is out of date

Only the standard library: it runs before nanobert is installed.
"""

import argparse
import csv
import json
import os
import re
import sys
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path

from results_tables import TABLES, WHAT_YOU_GET, Column, Table

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "benchmarks" / "records"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
README = ROOT / "README.md"
# The README's table sits between these two lines; everything else in README.md is left as it is.
TABLE_START = (
    "<!-- what-you-get: built by benchmarks/build_results.py from benchmarks/records; edit those -->"
)
TABLE_END = "<!-- /what-you-get -->"
WHAT_YOU_GET_ROWS = 7  # the README's first screen holds the table; more rows belong in RESULTS.md
VERDICTS = ("adopted", "not adopted", "measured")
REQUIRED = ("date", "name", "question", "protocol", "machine", "torch", "commit", "verdict", "why", "raw")
REQUIRED += ("key",)
EMPTY = "-"


class RecordError(Exception):
    """A record that cannot be read as records/README.md describes; the message names the record."""


@dataclass(frozen=True)
class Record:
    folder: Path
    data: dict

    @property
    def id(self) -> str:
        return self.folder.name


def load_records(root: Path = RECORDS) -> list[Record]:
    """Every record under `root`, oldest first, each checked against the format (a RecordError if not)."""
    records = [Record(p.parent, _read_json(p)) for p in sorted(root.glob("*/record.json"))]
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        if not (folder / "record.json").is_file():
            raise RecordError(f"{folder.name}: no record.json")
    for record in records:
        check(record)
    return sorted(records, key=lambda r: (r.data["date"], r.id))


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise RecordError(f"{path.parent.name}/record.json: not JSON ({e})") from None


def check(record: Record) -> None:
    """The rules of records/README.md that do not need a raw file read."""
    d, rid = record.data, record.id
    missing = [k for k in REQUIRED if k not in d]
    if missing:
        raise RecordError(f"{rid}: record.json lacks {', '.join(missing)}")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", d["date"]) or rid != f"{d['date']}-{d['name']}":
        raise RecordError(
            f"{rid}: the folder must be named DATE-NAME from record.json ({d['date']}-{d['name']})"
        )
    if d["verdict"] not in VERDICTS:
        raise RecordError(f"{rid}: verdict {d['verdict']!r} is none of {', '.join(VERDICTS)}")
    if not (record.folder / "README.md").is_file():
        raise RecordError(f"{rid}: no README.md")
    for raw in d["raw"]:
        if not (record.folder / raw["file"]).is_file():
            raise RecordError(f"{rid}: raw file {raw['file']} is missing")
    listed = {raw["file"] for raw in d["raw"]}
    rows = [(TABLES.get(row.get("table")), row) for row in d.get("results", [])]
    rows += [(WHAT_YOU_GET, row) for row in d.get("what_you_get", [])]
    for table, row in rows:
        if table is None:
            raise RecordError(
                f"{rid}: a results row names no table of {', '.join(TABLES)}: {row.get('table')!r}"
            )
        if table is WHAT_YOU_GET and not isinstance(row.get("order"), int):
            raise RecordError(f"{rid}: a what_you_get row needs an integer `order`")
        keys = {c.key for c in table.columns}
        for c in table.columns:
            if c.fmt == "label" and c.key not in row:
                raise RecordError(f"{rid}: a row of {table.title!r} lacks its {c.key!r}")
        unknown = set(row.get("cells", {})) - keys
        if unknown:
            raise RecordError(f"{rid}: {table.title!r} has no column {', '.join(sorted(unknown))}")
        for spec in row.get("cells", {}).values():
            if _spec(row, spec)["file"] not in listed:
                raise RecordError(
                    f"{rid}: a cell reads {_spec(row, spec)['file']}, which `raw` does not list"
                )


def _spec(row: dict, cell) -> dict:
    """A cell's full address: the row's `source` (file, row) with the cell's column, or the cell's own."""
    if isinstance(cell, str):
        return {**row["source"], "column": cell}
    return {**row.get("source", {}), **cell}


def resolve(record: Record, spec: dict) -> str:
    """The raw value a spec points at, as text: a CSV cell (`row`: a 1-based number or {column: value} that
    matches exactly one row; `column`), a JSON value (`key`: a dotted path), or a JSON-lines value (`line`,
    `key`)."""
    path = record.folder / spec["file"]
    where = f"{record.id}/{spec['file']}"
    if path.suffix == ".csv":
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        want = spec["row"]
        if isinstance(want, int):
            if not 1 <= want <= len(rows):
                raise RecordError(f"{where}: no row {want} (it has {len(rows)})")
            found = [rows[want - 1]]
        else:
            found = [r for r in rows if all(r.get(k) == str(v) for k, v in want.items())]
            if len(found) != 1:
                raise RecordError(f"{where}: {len(found)} rows match {want}, not one")
        if spec["column"] not in found[0]:
            raise RecordError(f"{where}: no column {spec['column']!r}")
        return found[0][spec["column"]].strip()
    if path.suffix in (".json", ".jsonl"):
        text = path.read_text()
        value = json.loads(text.splitlines()[spec["line"] - 1] if path.suffix == ".jsonl" else text)
        for part in spec["key"].split("."):
            if not isinstance(value, dict) or part not in value:
                raise RecordError(f"{where}: no key {spec['key']!r}")
            value = value[part]
        return "" if value is None else str(value)
    raise RecordError(f"{where}: raw files are .csv, .json or .jsonl")


def show(value: str, fmt: str) -> str:
    """A raw value as a table shows it. Numbers are rounded half up (0.2665 shows as 0.267); a value that is
    not a number (a mean with its spread, say) is shown as it is."""
    if value == "":
        return EMPTY
    if fmt == "text":
        return value
    try:
        number = Decimal(value.replace(",", ""))
    except InvalidOperation:
        return value
    if fmt == "int":
        return f"{int(number):,}"
    if fmt == "min":
        minutes = number / 60
        return f"{minutes:f}" if minutes == minutes.to_integral() else f"{minutes:.1f}"
    if fmt == "pct1":
        return f"{(number * 100).quantize(Decimal('0.1'), ROUND_HALF_UP)}%"
    if fmt.startswith("dec") or fmt.startswith("x"):  # decN: N decimals; xN: N decimals and an "x"
        digits = int(fmt[3:] if fmt.startswith("dec") else fmt[1:])
        shown = str(number.quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP))
        return shown + ("x" if fmt.startswith("x") else "")
    raise RecordError(f"unknown format {fmt!r}")


@dataclass(frozen=True)
class Cell:
    """One cell of a built table and where it came from (no `spec` for a label or an empty cell)."""

    text: str
    column: Column
    record: Record
    spec: dict | None = None
    raw: str | None = None


def build_row(record: Record, row: dict, table: Table) -> list[Cell]:
    cells = []
    for column in table.columns:
        if column.fmt == "label":
            cells.append(Cell(row[column.key], column, record))
        elif column.key in row.get("cells", {}):
            spec = _spec(row, row["cells"][column.key])
            raw = resolve(record, spec)
            cells.append(Cell(show(raw, spec.get("format", column.fmt)), column, record, spec, raw))
        else:
            cells.append(Cell(EMPTY, column, record))
    return cells


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def what_you_get(records: list[Record]) -> list[tuple[dict, list[Cell]]]:
    """The README table's rows, in their `order`, each with its cells and their sources."""
    rows = sorted(
        ((row, r) for r in records for row in r.data.get("what_you_get", [])), key=lambda x: x[0]["order"]
    )
    if len(rows) > WHAT_YOU_GET_ROWS:
        raise RecordError(f"the README's table takes {WHAT_YOU_GET_ROWS} rows; the records give {len(rows)}")
    return [(row, build_row(record, row, WHAT_YOU_GET)) for row, record in rows]


def what_you_get_table(records: list[Record]) -> str:
    """The README's table, linking each run to its record."""
    body = []
    for _row, cells in what_you_get(records):
        texts = [c.text for c in cells]
        texts[0] = f"[{texts[0]}](benchmarks/records/{cells[0].record.id}/)"
        body.append(texts)
    return markdown([c.header for c in WHAT_YOU_GET.columns], body)


def results_page(records: list[Record]) -> str:
    parts = [
        "# Results",
        "",
        "The current figures, one table per protocol, and the history of every experiment. Built by "
        "`python benchmarks/build_results.py` from [the records](records/) (each one a folder with the "
        "question, the exact command, the machine, the verdict and the raw figures); edit those, not this "
        "page. How to run the benchmarks: [README.md](README.md).",
    ]
    for key, table in TABLES.items():
        rows = [(row, r) for r in records for row in r.data.get("results", []) if row["table"] == key]
        rows.sort(key=lambda x: x[0].get("order", 0))  # stable: records' dates break ties
        if not rows:
            continue
        body = [
            [c.text for c in build_row(r, row, table)] + [f"[{r.id}](records/{r.id}/)"] for row, r in rows
        ]
        header = [c.header for c in table.columns] + ["record"]
        parts += ["", f"## {table.title}", "", table.about, "", markdown(header, body)]
    history = []
    for r in records:
        d = r.data
        key = f"{d['key']['label']}: {show(resolve(r, d['key']), d['key'].get('format', 'text'))}"
        history.append([d["date"], d["question"], d["verdict"], key, f"[{r.id}](records/{r.id}/)"])
    parts += [
        "",
        "## History",
        "",
        "Every experiment, oldest first: what it asked, whether its change was adopted, and one figure.",
        "",
        markdown(["date", "question", "verdict", "key figure", "record"], history),
        "",
    ]
    return "\n".join(parts)


def readme_with_table(readme: str, table: str) -> str:
    """README.md with `table` between the two marker lines (a RecordError when they are not there once)."""
    if readme.count(TABLE_START) != 1 or readme.count(TABLE_END) != 1:
        raise RecordError(f"README.md must hold the lines {TABLE_START!r} and {TABLE_END!r} once each")
    head, rest = readme.split(TABLE_START)
    _, tail = rest.split(TABLE_END)
    return f"{head}{TABLE_START}\n{table}\n{TABLE_END}{tail}"


def stale_pages(records: list[Record]) -> list[Path]:
    """The pages (RESULTS.md, README.md) whose built part differs from what the records give."""
    stale = []
    if not RESULTS.is_file() or RESULTS.read_text() != results_page(records):
        stale.append(RESULTS)
    readme = README.read_text()
    if readme != readme_with_table(readme, what_you_get_table(records)):
        stale.append(README)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page is out of date; write nothing")
    args = parser.parse_args(argv)
    try:
        records = load_records()
        if args.check:
            stale = stale_pages(records)
            for page in stale:
                print(
                    f"build_results.py: {os.path.relpath(page, ROOT)} is out of date; run python "
                    "benchmarks/build_results.py"
                )
            return 1 if stale else 0
        RESULTS.write_text(results_page(records))
        README.write_text(readme_with_table(README.read_text(), what_you_get_table(records)))
    except RecordError as e:
        print(f"build_results.py: error: {e}", file=sys.stderr)
        return 2
    print(f"build_results.py: {len(records)} records -> {os.path.relpath(RESULTS, ROOT)}, README.md's table")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
