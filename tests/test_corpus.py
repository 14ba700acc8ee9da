"""nanobert.data.corpus: sentence splitting, document boundaries, file errors and every source kind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nanobert.data.corpus import (
    WIKITEXT_HF_NAMES,
    documents_from_hf,
    documents_from_lines,
    find_wikitext_file,
    load_documents,
    load_hf_wikitext,
    read_text_file,
    split_sentences,
    toy_documents,
)
from nanobert.errors import NanobertError

# Real lines from WikiText-2 wiki.valid.tokens (the Homarus gammarus article), copied verbatim.
WIKI_TITLE = " = Homarus gammarus = \n"
WIKI_INTRO = (
    " Homarus gammarus , known as the European lobster or common lobster , is a species of <unk> lobster "
    "from the eastern Atlantic Ocean , Mediterranean Sea and parts of the Black Sea . It is closely related "
    "to the American lobster , H. americanus . It may grow to a length of 60 cm ( 24 in ) and a mass of 6 "
    "kilograms ( 13 lb ) , and bears a conspicuous pair of claws . In life , the lobsters are blue , only "
    'becoming " lobster red " on cooking . Mating occurs in the summer , producing eggs which are carried '
    "by the females for up to a year before hatching into <unk> larvae . Homarus gammarus is a highly "
    "esteemed food , and is widely caught using lobster pots , mostly around the British Isles . \n"
)
WIKI_LIFE_CYCLE = (
    " The eggs hatch at night , and the larvae swim to the water surface where they drift with the ocean "
    "currents , preying on <unk> . This stage involves three <unk> and lasts for 15 – 35 days . After the "
    "third moult , the juvenile takes on a form closer to the adult , and adopts a <unk> lifestyle . The "
    "juveniles are rarely seen in the wild , and are poorly known , although they are known to be capable "
    "of digging extensive burrows . It is estimated that only 1 larva in every 20 @,@ 000 survives to the "
    "<unk> phase . When they reach a carapace length of 15 mm ( 0 @.@ 59 in ) , the juveniles leave their "
    "burrows and start their adult lives . \n"
)
WIKI_FISHING = (
    " <unk> are mostly fished using lobster pots , although lines <unk> with <unk> or <unk> sometimes "
    "succeed in tempting them out , to allow them to be caught in a net or by hand . In 2008 , 4 @,@ 386 t "
    "of H. gammarus were caught across Europe and North Africa , of which 3 @,@ 462 t ( 79 % ) was caught "
    "in the British Isles ( including the Channel Islands ) . The minimum landing size for H. gammarus is a "
    "carapace length of 87 mm ( 3 @.@ 4 in ) . \n"
)

SHARED_WIKITEXT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "wikitext-2"


# --- sentences ---------------------------------------------------------------------------------------


def test_wikitext_sentences_keep_joined_numbers_and_initials() -> None:
    sentences = split_sentences(WIKI_LIFE_CYCLE)
    assert len(sentences) == 6
    assert (
        sentences[4] == "It is estimated that only 1 larva in every 20 @,@ 000 survives to the <unk> phase ."
    )
    assert sentences[5].startswith("When they reach a carapace length of 15 mm ( 0 @.@ 59 in )")
    assert all(s.endswith(" .") for s in sentences)

    fishing = split_sentences(WIKI_FISHING)
    assert [s.split()[:2] for s in fishing] == [["<unk>", "are"], ["In", "2008"], ["The", "minimum"]]
    assert fishing[2].endswith("( 3 @.@ 4 in ) .")


def test_wikitext_quotes_and_initials_do_not_split() -> None:
    sentences = split_sentences(WIKI_INTRO)
    assert len(sentences) == 6
    assert sentences[1] == "It is closely related to the American lobster , H. americanus ."
    assert sentences[3] == 'In life , the lobsters are blue , only becoming " lobster red " on cooking .'


def test_prose_sentences_and_abbreviations() -> None:
    assert split_sentences("Hello world. It is fine.") == ["Hello world.", "It is fine."]
    text = "Mr. Smith met Dr. Jones, e.g. at 3.5 p.m. yesterday. J. R. R. Tolkien wrote it. Really?! Yes!"
    assert split_sentences(text) == [
        "Mr. Smith met Dr. Jones, e.g. at 3.5 p.m. yesterday.",
        "J. R. R. Tolkien wrote it.",
        "Really?!",
        "Yes!",
    ]
    assert split_sentences("The U.S. Army is old... and big. Next") == [
        "The U.S. Army is old... and big.",
        "Next",
    ]


def test_closing_quotes_and_brackets_stay_with_their_sentence() -> None:
    assert split_sentences('He said "stop." Then (quietly) she left.') == [
        'He said "stop."',
        "Then (quietly) she left.",
    ]
    assert split_sentences('She said , " It is fine . " Then " we " left .') == [
        'She said , " It is fine . "',
        'Then " we " left .',
    ]
    assert split_sentences("It rained ( a lot . ) We stayed .") == ["It rained ( a lot . )", "We stayed ."]


def test_whitespace_only_gives_no_sentences() -> None:
    assert split_sentences("   \t ") == []
    assert split_sentences("  one   two  ") == ["one two"]


# --- documents ---------------------------------------------------------------------------------------


def test_headings_start_documents_and_sections_are_dropped() -> None:
    lines = [
        " \n",
        WIKI_TITLE,
        " \n",
        WIKI_INTRO,
        " \n",
        " = = Life cycle = = \n",
        " \n",
        WIKI_LIFE_CYCLE,
        " = = = Deeper = = = \n",
        WIKI_FISHING,
        " = Second article = \n",
        " One sentence here . Two sentences here . \n",
        " = Empty article = \n",
        " \n",
    ]
    documents = documents_from_lines(lines)
    # Blank lines inside an article do not split it; the empty article is dropped.
    assert [len(d) for d in documents] == [6 + 6 + 3, 2]
    assert not any("=" in s for d in documents for s in d)
    assert documents[1] == ["One sentence here .", "Two sentences here ."]


def test_unk_becomes_the_special_token() -> None:
    (document,) = documents_from_lines([WIKI_TITLE, WIKI_FISHING])
    assert document[0].startswith("[UNK] are mostly fished")
    assert not any("<unk>" in s for s in document)


def test_blank_lines_split_documents_when_there_are_no_titles() -> None:
    lines = ["First doc. Two sentences.", "Same doc, next paragraph.", "", "", "Second doc.", "   ", "Third."]
    assert documents_from_lines(lines) == [
        ["First doc.", "Two sentences.", "Same doc, next paragraph."],
        ["Second doc."],
        ["Third."],
    ]
    # A single title anywhere switches to articles, even one with nothing under it.
    expected = ["First doc.", "Two sentences.", "Same doc, next paragraph.", "Second doc.", "Third."]
    assert documents_from_lines([*lines, " = Trailing title = "]) == [expected]


def test_toy_documents_are_distinct_and_fresh() -> None:
    documents = toy_documents()
    assert len(documents) == 4 and all(3 <= len(d) <= 5 for d in documents)
    documents[0].clear()
    assert toy_documents()[0]
    assert load_documents("toy", "valid") == toy_documents()


# --- files -------------------------------------------------------------------------------------------


def test_read_text_file_and_bom(tmp_path: Path) -> None:
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"\xef\xbb\xbf = Caf\xc3\xa9 = \n First one . Second one . \n = Other = \n Third . \n")
    assert read_text_file(path) == [["First one .", "Second one ."], ["Third ."]]
    assert load_documents(path) == read_text_file(path)


def test_read_text_file_errors(tmp_path: Path) -> None:
    with pytest.raises(NanobertError, match="no such file"):
        read_text_file(tmp_path / "missing.txt")
    with pytest.raises(NanobertError, match="is a directory"):
        read_text_file(tmp_path)
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"PK\x03\x04\x00\x00 some archive")
    with pytest.raises(NanobertError, match="looks like a binary file"):
        read_text_file(binary)
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("Good line.\nCaf\u00e9 au lait.\n".encode("latin-1"))
    with pytest.raises(NanobertError, match=r"latin1\.txt is not valid UTF-8 \(byte offset 14\).*iconv"):
        read_text_file(latin1)


def test_empty_corpus_and_unknown_source(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text(" = Title only = \n \n", encoding="utf-8")
    assert read_text_file(empty) == []
    with pytest.raises(NanobertError, match="empty"):
        load_documents(empty)
    with pytest.raises(NanobertError, match="no such corpus: nowhere.txt"):
        load_documents("nowhere.txt")


def test_directory_lookup_prefers_raw(tmp_path: Path) -> None:
    (tmp_path / "wiki.valid.tokens").write_text(" = A = \n Tokens file . \n", encoding="utf-8")
    assert find_wikitext_file(tmp_path, "valid").name == "wiki.valid.tokens"
    (tmp_path / "wiki.valid.raw").write_text(" = A = \n Raw file. \n", encoding="utf-8")
    assert find_wikitext_file(tmp_path, "validation").name == "wiki.valid.raw"
    assert load_documents(tmp_path, "valid") == [["Raw file."]]
    with pytest.raises(NanobertError, match=r"no wiki\.train\.raw or wiki\.train\.tokens.*wiki\.valid\.raw"):
        load_documents(tmp_path, "train")


# --- Hugging Face datasets -----------------------------------------------------------------------------


def test_documents_from_hf_dataset() -> None:
    datasets = pytest.importorskip("datasets")
    rows = [
        "",
        WIKI_TITLE,
        "",
        WIKI_INTRO,
        " = = Life cycle = = \n",
        WIKI_LIFE_CYCLE,
        " = Next = \n",
        " B . \n",
    ]
    dataset = datasets.Dataset.from_dict({"text": rows})
    assert documents_from_hf(dataset) == documents_from_lines(rows)
    assert documents_from_hf([{"text": row} for row in rows]) == documents_from_lines(rows)


def test_load_hf_wikitext_calls_load_dataset(monkeypatch: pytest.MonkeyPatch) -> None:
    datasets = pytest.importorskip("datasets")
    calls = []

    def fake_load_dataset(path: str, name: str, split: str) -> object:
        calls.append((path, name, split))
        return datasets.Dataset.from_dict({"text": [WIKI_TITLE, WIKI_FISHING]})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    assert load_documents("wikitext-2-raw-v1", "valid") == documents_from_lines([WIKI_TITLE, WIKI_FISHING])
    assert calls == [("wikitext", "wikitext-2-raw-v1", "validation")]

    def offline(path: str, name: str, split: str) -> object:
        raise ConnectionError("Couldn't reach the Hugging Face Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(NanobertError, match="could not load wikitext-2-v1.*--train/--valid"):
        load_hf_wikitext(WIKITEXT_HF_NAMES[1], "train")


# --- the real file -------------------------------------------------------------------------------------


def test_real_wikitext2_valid() -> None:
    path = SHARED_WIKITEXT / "wiki.valid.tokens"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    documents = load_documents(SHARED_WIKITEXT, "valid")
    num_sentences = sum(len(d) for d in documents)
    print(f"wiki.valid.tokens: {len(documents)} documents, {num_sentences} sentences")
    assert len(documents) == 60
    # 1,841 paragraphs of four to five sentences each on average.
    assert 7000 < num_sentences < 9500
    assert documents[0][1] == "It is closely related to the American lobster , H. americanus ."


def test_an_unreachable_hub_fails_fast_and_names_the_offline_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline, the first run's error comes at once (only the local cache is tried, in Hugging Face's
    offline mode) and names both ways forward: local files, or the built-in toy corpus."""
    datasets = pytest.importorskip("datasets")
    import nanobert.data.corpus as corpus

    seen = []

    def cache_only(path: str, name: str, split: str) -> object:
        seen.append(os.environ.get("HF_HUB_OFFLINE"))
        raise ConnectionError("Couldn't reach 'wikitext' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(corpus, "hub_reachable", lambda timeout=corpus.HUB_PROBE_SECONDS: False)
    monkeypatch.setattr(datasets, "load_dataset", cache_only)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(NanobertError) as error:
        load_documents("wikitext-2-raw-v1", "train")
    assert seen == ["1"] and "HF_HUB_OFFLINE" not in os.environ  # offline mode only while loading
    message = str(error.value)
    assert "unreachable" in message and "--train/--valid" in message and "--data toy" in message


def test_hub_probe_answers_quickly_for_an_address_that_does_not_resolve(monkeypatch) -> None:
    import time

    from nanobert.data.corpus import hub_reachable

    monkeypatch.setenv("HF_ENDPOINT", "https://nanobert-no-such-host.invalid")
    start = time.perf_counter()
    assert hub_reachable(timeout=2.0) is False
    assert time.perf_counter() - start < 5.0
