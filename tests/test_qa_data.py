"""SQuAD files, windows of word pieces, character offsets and span decoding, on small files written here."""

import json

import numpy as np
import pytest

from nanobert.errors import NanobertError
from nanobert.qa_data import QAExample, best_answers, featurize, read_squad
from nanobert.tokenizer import train_tokenizer

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar".split()


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer([" ".join(WORDS) + " . , ? Where is it"] * 4, vocab_size=120, min_frequency=1)


def squad(path, paragraphs):
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}))
    return path


def test_read_squad_v1_v2_and_unlabelled(tmp_path):
    context = "Alpha met Bravo. Bravo met Alpha again."
    path = squad(tmp_path / "a.json", [{"context": context, "qas": [
        {"id": "1", "question": "Who met Bravo?", "answers": [{"text": "Alpha", "answer_start": 0}]},
        # a wrong offset (the rebuilt SQuAD files use first occurrences) is replaced by the text's first one
        {"id": "2", "question": "Who?", "answers": [{"text": "Alpha", "answer_start": 5},
                                                    {"text": "Alpha again"}]},
        {"id": "3", "question": "Why?", "answers": [], "is_impossible": True},
        {"id": "4", "question": "What?"},
    ]}])  # fmt: skip
    examples = read_squad(path)
    assert [e.id for e in examples] == ["1", "2", "3", "4"]
    assert examples[1].answers == ["Alpha", "Alpha again"] and examples[1].answer_start == 0
    assert examples[2].answers == [] and examples[3].answers is None


@pytest.mark.parametrize(
    "content, needle",
    [
        ("not json", "not SQuAD JSON"),
        ('{"version": "1.1"}', "not SQuAD JSON"),
        ('{"data": [{"title": "t"}]}', "has no 'paragraphs'"),
        ('{"data": [{"paragraphs": [{"context": "  ", "qas": []}]}]}', "empty context"),
        ('{"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "x", "question": "q?", '
         '"answers": [{"text": "zzz", "answer_start": 0}]}]}]}]}', "'zzz' does not occur in its context"),
        ('{"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "x", "question": "q?", '
         '"answers": []}]}]}]}', "no answer and is not marked is_impossible"),
        ('{"data": []}', "holds no questions"),
    ],
)  # fmt: skip
def test_read_squad_errors_are_one_line_messages(tmp_path, content, needle):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(NanobertError, match=needle):
        read_squad(path)
    with pytest.raises(NanobertError, match="does not exist"):
        read_squad(tmp_path / "missing.json")


def test_offsets_map_every_answer_back_to_its_exact_text(tokenizer):
    context = "Alpha, bravo; CHARLIE delta. Echo foxtrot golf? Hotel india juliet."
    answers = ["bravo", "CHARLIE delta", "golf", "Hotel india juliet"]
    examples = [
        QAExample(str(i), "Where is it?", context, [a], context.index(a)) for i, a in enumerate(answers)
    ]
    features = featurize(examples, tokenizer, max_seq_len=64, doc_stride=16)
    for f, (s, e) in enumerate(features.positions):
        begin, end = features.offsets[f][s][0], features.offsets[f][e][1]
        assert context[begin:end] == answers[features.example_index[f]]  # characters -> pieces -> characters
        assert features.token_type_ids[f][s] == 1  # the answer is in segment B


def test_a_long_context_is_cut_into_overlapping_windows_with_the_answer_in_the_right_ones(tokenizer):
    context = " ".join(WORDS * 4)  # 60 words, far more than one window holds
    answer = "mike november"
    start = context.index(answer, 200)  # an occurrence deep in the text
    example = QAExample("q", "Where is it?", context, [answer], start)
    features = featurize([example], tokenizer, max_seq_len=24, doc_stride=8)
    assert len(features) > 3
    question = len(tokenizer.encode("Where is it?", add_special_tokens=False).ids)
    assert all(
        len(ids) <= 24 and ids[question + 1] == 3 for ids in features.input_ids
    )  # [SEP] after question
    holding = []
    for f, (s, e) in enumerate(features.positions):
        covered = [o for o in features.offsets[f] if o is not None]
        inside = covered[0][0] <= start and start + len(answer) <= covered[-1][1]
        assert (s, e) != (0, 0) if inside else (s, e) == (0, 0)  # a window without the answer points at [CLS]
        holding += [f] if inside else []
    assert holding  # found in at least one window, and each of those decodes to the answer
    for f in holding:
        s, e = features.positions[f]
        assert context[features.offsets[f][s][0] : features.offsets[f][e][1]] == answer
    # every context piece has exactly one window that gives it the most context
    per_window = [sum(m) for m in features.max_context]
    assert sum(per_window) == len(tokenizer.encode(context, add_special_tokens=False).ids)


def test_decoding_takes_the_best_valid_span_over_windows_and_says_no_answer_for_v2(tokenizer):
    context = " ".join(WORDS * 3)
    example = QAExample("q", "Where is it?", context, None)
    features = featurize([example], tokenizer, max_seq_len=24, doc_stride=8)
    n = len(features)
    starts = [np.full(len(ids), -5.0) for ids in features.input_ids]
    ends = [np.full(len(ids), -5.0) for ids in features.input_ids]
    last = n - 1  # make the best span live in the last window, 2 pieces long, at its most-context pieces
    pieces = [i for i, m in enumerate(features.max_context[last]) if m]
    s, e = pieces[0], pieces[1]
    starts[last][s], ends[last][e] = 4.0, 3.0
    ends[last][s - 1] = 9.0  # an end before the start is never taken
    answer = best_answers([example], features, starts, ends)["q"]
    offsets = features.offsets[last]
    assert answer.text == context[offsets[s][0] : offsets[e][1]] and (answer.start, answer.end) == (
        offsets[s][0],
        offsets[e][1],
    )
    assert answer.score == pytest.approx(7.0) and 0 < answer.probability < 1
    assert best_answers([example], features, starts, ends, max_answer_length=1)["q"].text != answer.text
    for f in range(n):  # a [CLS] score above the best span's: no answer, but only where that is allowed (v2)
        starts[f][0] = ends[f][0] = 10.0
    assert best_answers([example], features, starts, ends, null_threshold=0.0)["q"].text == ""
    assert best_answers([example], features, starts, ends, null_threshold=None)["q"].text == answer.text
