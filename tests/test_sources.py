"""The one held-out rule: which documents a run holds out, for every way of naming its data."""

import pytest
from helpers import write_corpus

from nanobert.data.corpus import read_text_file, toy_documents
from nanobert.data.prepare import prepare_corpus
from nanobert.data.sources import DEFAULT_DATA, DataSources
from nanobert.errors import NanobertError
from nanobert.tokenizer import encode_documents, train_tokenizer


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path / "corpus.txt", n_docs=12)


def test_a_single_file_holds_out_its_last_tenth(corpus):
    docs = read_text_file(corpus)
    for sources in (DataSources(data=str(corpus)), DataSources(data=None, train_file=str(corpus))):
        train, held, note = sources.documents()
        assert train == docs[:-2] and held == docs[-2:] and "last 2 documents" in note
        assert sources.documents(with_train=False)[1] == held  # evaluate asks for the same split


def test_a_small_file_is_its_own_held_out_set_and_says_so(tmp_path):
    small = write_corpus(tmp_path / "small.txt", n_docs=4)
    train, held, note = DataSources(data=str(small)).documents()
    assert train == held and "TRAINING data" in note


def test_valid_file_toy_and_wikitext_directories(tmp_path, corpus):
    valid = write_corpus(tmp_path / "valid.txt", n_docs=3, seed=1)
    train, held, note = DataSources(data=None, train_file=str(corpus), valid_file=str(valid)).documents()
    assert train == read_text_file(corpus) and held == read_text_file(valid) and str(valid) in note
    assert DataSources(data=None, valid_file=str(valid)).documents(with_train=False)[1] == held
    train, held, _ = DataSources(data="toy").documents()
    assert train == held == toy_documents()
    wiki = tmp_path / "wiki"
    wiki.mkdir()
    write_corpus(wiki / "wiki.train.tokens", n_docs=5)
    write_corpus(wiki / "wiki.valid.tokens", n_docs=3, seed=2)
    train, held, note = DataSources(data=str(wiki)).documents()
    assert (
        held == read_text_file(wiki / "wiki.valid.tokens") and len(train) == 5 and "validation split" in note
    )


def test_a_prepared_corpus_holds_out_its_valid_split(tmp_path, corpus):
    valid = write_corpus(tmp_path / "valid.txt", n_docs=3, seed=1)
    prepare_corpus(str(corpus), tmp_path / "prep", valid=str(valid), vocab_size=120, quiet=True)
    sources = DataSources(data=None, prepared=str(tmp_path / "prep"))
    tokenizer = sources.prepared_corpus().tokenizer()
    held, note = sources.held_out(tokenizer)
    assert held == encode_documents(tokenizer, read_text_file(valid)) and "valid split" in note
    prepare_corpus(str(corpus), tmp_path / "bare", vocab_size=120, quiet=True)
    with pytest.raises(NanobertError, match="no valid split"):
        DataSources(data=None, prepared=str(tmp_path / "bare")).held_out(tokenizer)
    other = write_corpus(tmp_path / "other.txt", n_docs=3, seed=5)  # --valid wins over the prepared split
    held, _ = DataSources(data=None, prepared=str(tmp_path / "bare"), valid_file=str(other)).held_out(
        tokenizer
    )
    assert held == encode_documents(tokenizer, read_text_file(other))


def test_held_out_tokens_are_the_held_out_documents_encoded(corpus):
    tokenizer = train_tokenizer([s for d in read_text_file(corpus) for s in d], 120, min_frequency=1)
    sources = DataSources(data=str(corpus))
    held, note = sources.held_out(tokenizer)
    assert held == encode_documents(tokenizer, sources.documents()[1]) and "last 2" in note


def test_what_a_new_run_names():
    assert DataSources.for_new_run() == DataSources(data=DEFAULT_DATA)
    assert DataSources.for_new_run(train_file="a.txt").data is None
    with pytest.raises(NanobertError, match="--prepared replaces"):
        DataSources.for_new_run(data="toy", prepared="dir")
    with pytest.raises(NanobertError, match="no data given"):
        DataSources(data=None).documents()
