"""Every figure of benchmarks/RESULTS.md and of the README's "What you get" table is read from a record's raw
file by benchmarks/build_results.py, and both pages are what the records build today
(`python benchmarks/build_results.py` rewrites them after a record changes)."""

import csv
import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "benchmarks" / "build_results.py"


@pytest.fixture(scope="module")
def build():
    """benchmarks/build_results.py as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("build_results", BUILD)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def records(build):
    return build.load_records()


def readme_table(build) -> tuple[int, list[list[str]]]:
    """(the line number where the built table ends, its body rows as cell texts) from README.md."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start, end = lines.index(build.TABLE_START), lines.index(build.TABLE_END)
    rows = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in lines[start + 3 : end]]
    return end + 1, rows


def raw_value(folder: Path, spec: dict) -> str:
    """The raw value at a figure's address, read here with csv/json alone (not through the build script)."""
    path = folder / spec["file"]
    if path.suffix == ".csv":
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        want = spec["row"]
        row = (
            rows[want - 1]
            if isinstance(want, int)
            else next(r for r in rows if all(r[k] == str(v) for k, v in want.items()))
        )
        return row[spec["column"]].strip()
    value = json.loads(
        path.read_text().splitlines()[spec["line"] - 1] if path.suffix == ".jsonl" else path.read_text()
    )
    for part in spec["key"].split("."):
        value = value[part]
    return str(value)


def test_the_records_cover_the_protocols_and_every_key_figure_resolves(build, records):
    protocols = {"small", "default-scale", "throughput", "fine-tuning", "qa"}
    assert {r.data["protocol"] for r in records} >= protocols
    for record in records:
        key = record.data["key"]
        assert build.resolve(record, key) == raw_value(record.folder, key) != "", record.id


def test_results_and_the_readme_table_are_what_the_records_build(build, records):
    stale = build.stale_pages(records)
    assert stale == [], f"out of date: {stale}; run python benchmarks/build_results.py"


def test_every_figure_in_the_readme_table_comes_from_a_raw_file(build, records):
    _, rows = readme_table(build)
    built = build.what_you_get(records)
    assert len(rows) == len(built) <= build.WHAT_YOU_GET_ROWS == 7  # a row per machine kind and length
    figures = 0
    for texts, (_row, cells) in zip(rows, built, strict=True):
        assert len(texts) == len(cells)
        for text, cell in zip(texts, cells, strict=True):
            if cell.column.fmt == "label":
                continue
            if cell.spec is None:
                assert text == build.EMPTY, f"{text!r} in the README's table has no raw file behind it"
                continue
            listed = {raw["file"] for raw in cell.record.data["raw"]}
            assert cell.spec["file"] in listed and (cell.record.folder / cell.spec["file"]).is_file()
            shown = build.show(
                raw_value(cell.record.folder, cell.spec), cell.spec.get("format", cell.column.fmt)
            )
            assert text == shown, (
                f"{cell.record.id}, {cell.column.key}: README says {text}, the raw file {shown}"
            )
            figures += 1
    assert figures >= 2 * len(rows)


def test_the_readme_answers_on_its_first_screen(build, records):
    end, rows = readme_table(build)
    assert end <= 60, "the 'What you get' table must end within the README's first 60 lines"
    first_screen = "\n".join((ROOT / "README.md").read_text().splitlines()[:60])
    machines = {cells[1] for cells in rows}
    assert any("AMD" in m for m in machines)
    # what the command gives on each kind of CPU users have, in words, even where no row measured it
    for kind in ("AVX2 only", "AVX-512 without bf16", "AVX512-BF16", "AMX-BF16"):
        assert kind in first_screen, kind
    assert "GPU" in first_screen and "not measured" in first_screen  # no GPU row without a measured figure


def numbers_in(value) -> list[float]:
    """Every number in a raw file's parsed content: JSON numbers, and strings (CSV cells) that parse."""
    if isinstance(value, dict):
        return [n for v in value.values() for n in numbers_in(v)]
    if isinstance(value, list):
        return [n for v in value for n in numbers_in(v)]
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    try:
        return [float(value)]
    except (TypeError, ValueError):
        return []


def test_every_figure_in_the_readme_first_screen_prose_comes_from_a_raw_file(records):
    """The prose around the table is held as the table is: each measured figure on the README's first screen
    (a decimal of three places, or a percentage of one) is a value, as shown, of a CSV table of a record the
    first screen links to."""
    first_screen = (ROOT / "README.md").read_text().splitlines()[:60]
    linked = [r for r in records if f"records/{r.id}/" in "\n".join(first_screen)]
    shown = set()
    for record in linked:
        for raw in record.data["raw"]:
            path = record.folder / raw["file"]
            if path.suffix != ".csv":  # the tables a record keeps its figures in, not every logged step
                continue
            values = numbers_in([cell for row in csv.reader(path.open()) for cell in row])
            shown |= {f"{v:.3f}" for v in values} | {f"{v:.1f}%" for v in values}
            shown |= {f"{100 * v:.1f}%" for v in values if v <= 1}
    prose = "\n".join(line for line in first_screen if not line.startswith("|"))
    figures = re.findall(r"(?<![\d.,])(\d\.\d{3}|\d+\.\d%)(?!\d)", prose)
    assert figures, "the first screen's prose names no measured figure"
    assert [f for f in figures if f not in shown] == []


def test_transcribed_records_say_so(records):
    for record in records:
        transcribed = [raw for raw in record.data["raw"] if "transcribed" in raw]
        if transcribed:
            assert "transcribed" in (record.folder / "README.md").read_text(), record.id


def test_a_record_that_breaks_the_format_is_refused_by_name(build, records, tmp_path):
    source = next(r for r in records if r.data.get("results"))
    copy = tmp_path / "records" / source.id
    shutil.copytree(source.folder, copy)
    data = json.loads((copy / "record.json").read_text())

    first = next(iter(data["results"][0]["cells"]))
    data["results"][0]["cells"][first] = "no_such_column"
    (copy / "record.json").write_text(json.dumps(data))
    (loaded,) = build.load_records(tmp_path / "records")
    with pytest.raises(build.RecordError, match=re.escape(source.id)):
        build.results_page([loaded])

    data["verdict"] = "maybe"
    (copy / "record.json").write_text(json.dumps(data))
    with pytest.raises(build.RecordError, match="verdict"):
        build.load_records(tmp_path / "records")

    copy.rename(tmp_path / "records" / "2026-01-01-renamed")
    with pytest.raises(build.RecordError, match="DATE-NAME"):
        build.load_records(tmp_path / "records")


def test_check_fails_on_a_stale_page_and_the_build_mends_it(build, tmp_path, monkeypatch, capsys):
    results, readme = tmp_path / "RESULTS.md", tmp_path / "README.md"
    results.write_text("# Results\n\nan old figure: 0.1\n")
    readme.write_text((ROOT / "README.md").read_text().replace("| 15 |", "| 14 |", 1))
    monkeypatch.setattr(build, "RESULTS", results)
    monkeypatch.setattr(build, "README", readme)
    assert build.main(["--check"]) == 1
    assert capsys.readouterr().out.count("is out of date") == 2
    assert build.main([]) == 0
    assert build.main(["--check"]) == 0
    assert readme.read_text() == (ROOT / "README.md").read_text()


def test_every_record_the_code_cites_exists():
    """Comments and docstrings keep a reason in a line and name the record behind it (DATE-NAME under
    benchmarks/records/); a renamed or missing record would leave the reason without its evidence."""
    cited = {}
    for path in sorted((ROOT / "src" / "nanobert").rglob("*.py")) + sorted((ROOT / "docs").glob("*.md")):
        for name in re.findall(r"\b(20\d\d-\d\d-\d\d-[a-z0-9]+(?:-[a-z0-9]+)*)", path.read_text()):
            cited.setdefault(name, path.name)
    assert cited, "no record cited at all: the pattern is wrong"
    missing = {
        name: where for name, where in cited.items() if not (ROOT / "benchmarks" / "records" / name).is_dir()
    }
    assert not missing, missing
