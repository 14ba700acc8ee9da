"""CSV, TSV and JSONL tables: formats, headers, columns by name or index, encodings, errors, writing back."""

import io
import json

import pytest

from nanobert.data.tables import detect_format, parse_column, read_table, write_table
from nanobert.errors import NanobertError


def test_formats_come_from_the_extension_unless_given(tmp_path):
    assert [detect_format(f"x{ext}") for ext in (".csv", ".TSV", ".tab", ".jsonl", ".ndjson")] == [
        "csv", "tsv", "tsv", "jsonl", "jsonl",
    ]  # fmt: skip
    assert detect_format("x.txt", "tsv") == "tsv"
    with pytest.raises(NanobertError, match="--format"):
        detect_format("x.txt")
    with pytest.raises(NanobertError, match="unknown format"):
        detect_format("x.csv", "xml")
    assert parse_column("3") == 3 and parse_column("label") == "label" and parse_column(2) == 2


def test_csv_with_a_header_a_bom_quotes_and_blank_lines(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes('\ufeffsentence,label\n"hello, world",pos\n\nbye,neg\n'.encode())
    table = read_table(path)
    assert table.header == ["sentence", "label"] and table.line_numbers == [2, 4]
    assert table.column("sentence") == ["hello, world", "bye"] and table.column("label") == ["pos", "neg"]
    assert table.column("missing", required=False) is None
    with pytest.raises(NanobertError, match="no column 'text'; its columns are: 'sentence', 'label'"):
        table.column("text")
    with pytest.raises(NanobertError, match="is an index"):
        table.column(0)


def test_headerless_tsv_never_quotes(tmp_path):
    path = tmp_path / "a.tsv"
    path.write_text('1\the said "hi\n0\tshort\n')
    table = read_table(path, header=False)
    assert table.header is None and table.column(1) == ['he said "hi', "short"]
    with pytest.raises(NanobertError, match="has no column 5"):
        table.column(5)
    with pytest.raises(NanobertError, match="is a name"):
        table.column("label")


def test_jsonl_objects_and_arrays(tmp_path):
    objects = tmp_path / "o.jsonl"
    objects.write_text('{"text": "a", "label": 1}\n{"text": "b"}\n')
    table = read_table(objects)
    assert table.column("label") == [1, None]  # a missing key is a missing cell
    arrays = tmp_path / "a.jsonl"
    arrays.write_text('["a", 1]\n["b", 0]\n')
    assert read_table(arrays).column(1) == [1, 0]
    with pytest.raises(NanobertError, match="needs every line to hold JSON objects"):
        read_table(arrays).column("text")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a"}\n{oops\n')
    with pytest.raises(NanobertError, match="line 2 of .* is not JSON"):
        read_table(bad)
    # JSON strings may hold line separators raw (json.dumps(ensure_ascii=False) writes them so): one record
    raw = tmp_path / "raw.jsonl"
    raw.write_text('{"text": "a\u2028b\u0085c"}\r\n{"text": "d"}\n', encoding="utf-8")
    assert read_table(raw).column("text") == ["a\u2028b\u0085c", "d"]


def test_a_cell_longer_than_csvs_default_cap_is_read(tmp_path):
    path = tmp_path / "long.tsv"
    path.write_text("sentence\tlabel\n" + "word " * 50_000 + "\t1\n")
    assert len(read_table(path).column("sentence")[0]) == 250_000


def test_encodings_and_empty_files(tmp_path):
    latin = tmp_path / "l.csv"
    latin.write_bytes("text\ncaf\u00e9\n".encode("latin-1"))
    with pytest.raises(NanobertError, match=r"not valid UTF-8 \(line 2, byte 0xe9\).*--encoding"):
        read_table(latin)
    assert read_table(latin, encoding="latin-1").column("text") == ["caf\u00e9"]
    with pytest.raises(NanobertError, match="unknown encoding"):
        read_table(latin, encoding="klingon")
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(NanobertError, match="empty: it has no rows"):
        read_table(tmp_path / "e.csv")
    (tmp_path / "h.csv").write_text("a,b\n")
    with pytest.raises(NanobertError, match="a header but no rows"):
        read_table(tmp_path / "h.csv")
    with pytest.raises(NanobertError, match="does not exist"):
        read_table(tmp_path / "missing.csv")


@pytest.mark.parametrize("name, text, header", [
    ("w.csv", "text,label\nhi,1\n", True),
    ("w.tsv", "hi\t1\n", False),
    ("w.jsonl", '{"text": "hi"}\n', True),
])  # fmt: skip
def test_write_table_appends_columns_in_the_same_format(tmp_path, name, text, header):
    path = tmp_path / name
    path.write_text(text)
    table = read_table(path, header=header)
    out = io.StringIO()
    write_table(table, {"prediction": ["pos"], "score": [0.5]}, out)
    lines = out.getvalue().splitlines()
    if name.endswith(".csv"):
        assert lines == ["text,label,prediction,score", "hi,1,pos,0.5"]
    elif name.endswith(".tsv"):
        assert lines == ["hi\t1\tpos\t0.5"]
    else:
        assert json.loads(lines[0]) == {"text": "hi", "prediction": "pos", "score": 0.5}
    write_table(table, {"prediction": ["pos"]}, tmp_path / "sub" / name)
    assert (tmp_path / "sub" / name).is_file()


def test_tsv_cells_are_written_back_as_read(tmp_path):
    """TSV has no quoting: a quote or backslash in a text is plain text, copied unchanged, and the output
    reads back to the same cells."""
    path = tmp_path / "q.tsv"
    path.write_text('text\tlabel\nhe said "hi" to me\tpos\na back\\slash, here\tneg\n')
    table = read_table(path)
    out = tmp_path / "out.tsv"
    write_table(table, {"prediction": ["pos", "neg"]}, out)
    written = out.read_text().splitlines()[1:]
    assert written == ['he said "hi" to me\tpos\tpos', "a back\\slash, here\tneg\tneg"]
    assert read_table(out).rows == [[*row, p] for row, p in zip(table.rows, ["pos", "neg"], strict=True)]


def test_ragged_rows_open_quotes_and_taken_column_names(tmp_path):
    """Short rows are padded so predictions sit under their names; a longer row, a name the file already
    uses, or a quote left open (which swallowed the rest of the file) is a one-line error."""
    short = tmp_path / "short.csv"
    short.write_text("text,label\ncat sat on mat\ndog ran,9\n")
    table = read_table(short)
    out = io.StringIO()
    write_table(table, {"prediction": ["a", "b"]}, out)
    assert out.getvalue().splitlines() == ["text,label,prediction", "cat sat on mat,,a", "dog ran,9,b"]
    long = tmp_path / "long.csv"
    long.write_text("text,label\ndog ran,9\nlog red,2,extra note\n")
    with pytest.raises(NanobertError, match="line 3 of .* has 3 cells, more than its header's 2"):
        read_table(long).check_new_columns(["prediction"])
    with pytest.raises(NanobertError, match="already has a column 'label'"):
        table.check_new_columns(["prediction", "label"])
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"text": "a"}\n{"text": "b", "prediction": "mine"}\n')
    with pytest.raises(NanobertError, match="already has a column 'prediction'"):
        read_table(jsonl).check_new_columns(["prediction", "probabilities"])
    stray = tmp_path / "stray.csv"
    stray.write_text('id,text\n1,"she said ""hi"" to me\n2,second row\n3,third row\n')
    with pytest.raises(NanobertError, match="is not valid CSV"):
        read_table(stray)
