"""Fine-tuning data: label order, dynamic padding, encodings and formats, the example stream."""

import numpy as np
import pytest
from helpers import WORDS

from nanobert.data.labelled import (
    Encoded,
    ExampleStream,
    TaskSpec,
    collate,
    label_key,
    label_order,
    load_split,
    train_batches,
)
from nanobert.data.tables import read_table
from nanobert.errors import NanobertError
from nanobert.tokenizer import train_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer([" ".join(WORDS), "café naïve red blue"] * 3, vocab_size=120, min_frequency=1)


def test_label_order_is_numeric_when_labels_are_numbers():
    assert label_order(["10", "2", "1", "2"]) == ["1", "2", "10"]
    assert label_order(["neg", "pos", "neg"]) == ["neg", "pos"]
    # NaN and inf are numbers to float() but not to an order: by string, the same under any hash seed
    assert label_order(["nan", "1", "2", "10", "3"]) == ["1", "10", "2", "3", "nan"]
    assert label_key(1.0) == label_key(1) == "1" and label_key(1.5) == "1.5" and label_key("1.0") == "1.0"


def test_collate_pads_dynamically():
    data = Encoded([[2, 5, 3], [2, 6, 7, 8, 3]], [[0, 0, 0], [0, 0, 0, 1, 1]], np.array([1, 0]))
    batch = collate(data, [0])
    assert batch["input_ids"].shape == (1, 3) and "attention_mask" not in batch
    batch = collate(data, [0, 1])
    assert batch["input_ids"].tolist() == [[2, 5, 3, 0, 0], [2, 6, 7, 8, 3]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert batch["labels"].tolist() == [1, 0]


def test_encodings_and_formats(tokenizer, tmp_path):
    latin = tmp_path / "latin.csv"
    latin.write_bytes("text,label\ncaf\u00e9 red,pos\nblue na\u00efve,neg\n".encode("latin-1"))
    spec = TaskSpec(text_col="text", label_col="label", encoding="latin-1")
    split, labels = load_split(latin, spec, tokenizer, 32, None)
    assert labels == ["neg", "pos"] and len(split.data) == 2
    with pytest.raises(NanobertError, match="--encoding"):
        load_split(latin, TaskSpec(text_col="text", label_col="label"), tokenizer, 32, None)
    # A .txt file read as TSV; GLUE-style TSV never quotes, so a quote is text.
    txt = tmp_path / "data.txt"
    txt.write_text('sentence\tlabel\nhe said "red\tpos\n')
    assert read_table(txt, "tsv").rows == [['he said "red', "pos"]]
    with pytest.raises(NanobertError, match="--format"):
        read_table(txt)
    # JSONL with integer labels and array rows indexed by position.
    jl = tmp_path / "arr.jsonl"
    jl.write_text('["red alpha", 1]\n["blue bravo", 0]\n\n["red charlie", 1]\n')
    split, labels = load_split(jl, TaskSpec(text_col=0, label_col=1), tokenizer, 32, None)
    assert labels == ["0", "1"] and split.data.labels.tolist() == [1, 0, 1]


def test_example_stream_is_a_fresh_shuffle_per_epoch():
    data = Encoded([[2, 5 + i, 3] for i in range(7)], [[0, 0, 0]] * 7, np.arange(7))
    stream = ExampleStream(data, batch_size=3, seed=11)
    assert stream.batches_per_epoch() == 3
    seen = [stream.next() for _ in range(6)]  # two epochs
    for epoch, batches in ((1, seen[:3]), (2, seen[3:])):
        labels = [int(x) for batch, state in batches for x in batch["labels"]]
        assert sorted(labels) == list(range(7)) and all(state["epoch"] == epoch for _, state in batches)
        order = np.concatenate(train_batches(7, 3, 11, epoch))
        assert labels == order.tolist()  # the pure function of (seed, epoch)
    assert seen[0][1] == {"epoch": 1, "index": 1}
