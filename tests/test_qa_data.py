"""SQuAD files, windows of word pieces, character offsets and span decoding, on small files written here."""

import json
import re

import numpy as np
import pytest

from nanobert.data.squad import QAExample, _max_context, _windows, best_answers, featurize, read_squad
from nanobert.errors import NanobertError
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
        # every wrong type is a one-line error naming where it is, never a TypeError
        ('[1, 2]', "the file is a list, not an object"),
        ('{"data": {"title": "t"}}', "the file has 'data' an object, not a list"),
        ('{"data": [5]}', "article 0 is a number, not an object"),
        ('{"data": [{"paragraphs": 5}]}', "article 0 has 'paragraphs' a number, not a list"),
        ('{"data": [{"paragraphs": ["abc"]}]}', "article 0 paragraph 0 is a string, not an object"),
        ('{"data": [{"paragraphs": [{"context": 7, "qas": []}]}]}', "paragraph 0 has 'context' a number"),
        ('{"data": [{"paragraphs": [{"context": "abc", "qas": 5}]}]}',
         "article 0 paragraph 0 has 'qas' a number, not a list"),
        ('{"data": [{"paragraphs": [{"context": "abc", "qas": [null]}]}]}',
         "article 0 paragraph 0 question 0 is null, not an object"),
        ('{"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": [1], "question": "q?"}]}]}]}',
         "question 0 has 'id' a list, not a string"),
        ('{"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "x", "question": 3}]}]}]}',
         "question x has 'question' a number, not a string"),
        ('{"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "x", "question": "q?", '
         '"answers": null}]}]}]}', "question x has 'answers' null, not a list"),
        ('{"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "x", "question": "q?", '
         '"answers": 5}]}]}]}', "question x has 'answers' a number, not a list"),
        ('{"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "x", "question": "q?", '
         '"answers": ["b"]}]}]}]}', "question x answer 0 is a string, not an object"),
        ('{"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "x", "question": "q?", '
         '"answers": [{"text": 1}]}]}]}]}', "question x answer 0 has 'text' a number, not a string"),
        ('{"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "x", "question": "q?", '
         '"answers": [{"text": "b", "answer_start": "1"}]}]}]}]}',
         "question x answer 0 has 'answer_start' a string, not a whole number"),
        ('{"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "x", "question": "q?", '
         '"answers": [], "is_impossible": "yes"}]}]}]}', "'is_impossible' a string, not true/false"),
        ('{"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "x", "question": "q?"}, '
         '{"id": "x", "question": "r?"}]}]}]}', "question id x occurs twice"),
    ],
)  # fmt: skip
def test_read_squad_errors_are_one_line_messages(tmp_path, content, needle):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(NanobertError, match=re.escape(needle)) as error:
        read_squad(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)  # names the file, on one line
    with pytest.raises(NanobertError, match="does not exist"):
        read_squad(tmp_path / "missing.json")


@pytest.mark.parametrize("answer_start", [-2, -1, 3, 99, 0, None])
def test_a_negative_or_out_of_range_answer_start_is_a_misplaced_offset(tmp_path, answer_start):
    # context[-2:-1] == "b": a negative start must not pass for a right one (and then be called missing)
    answer = {"text": "b"} | ({} if answer_start is None else {"answer_start": answer_start})
    path = squad(tmp_path / "a.json", [{"context": "abc", "qas": [
        {"id": "x", "question": "q?", "answers": [answer]}]}])  # fmt: skip
    (example,) = read_squad(path)
    assert example.answers == ["b"] and example.answer_start == 1  # the text's first occurrence


def test_the_squad_version_is_the_files(tmp_path):
    """v1.1 unless the file says version 2.x or marks a question is_impossible; every example carries it."""
    qas = [{"id": "1", "question": "Who?", "answers": [{"text": "Alpha", "answer_start": 0}]}]
    impossible = {"id": "2", "question": "Why?", "answers": [], "is_impossible": True}
    possible = {**qas[0], "id": "3", "is_impossible": False}
    cases = [("1.1", qas, False), ("v2.0", qas, True), ("2.0", qas, True), ("1.1", [*qas, impossible], True),
             ("1.1", [*qas, possible], False), (None, qas, False)]  # fmt: skip
    for version, questions, expected in cases:
        path = tmp_path / "v.json"
        data = {"data": [{"paragraphs": [{"context": "Alpha met Bravo.", "qas": questions}]}]}
        path.write_text(json.dumps(data | ({"version": version} if version else {})))
        assert [e.version_2 for e in read_squad(path)] == [expected] * len(questions), version


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


def google_is_max_context(windows, w, position):
    """google-research/bert `_check_is_max_context`, piece by piece, as the reference."""
    best, best_score = None, None
    for i, (start, length) in enumerate(windows):
        if start <= position < start + length:
            score = min(position - start, start + length - 1 - position) + 0.01 * length
            if best_score is None or score > best_score:
                best, best_score = i, score
    return best == w


@pytest.mark.parametrize(
    "n, room, stride", [(1, 5, 2), (7, 7, 3), (8, 7, 3), (40, 9, 4), (53, 11, 11), (29, 6, 1)]
)
def test_the_max_context_of_a_window_layout_is_googles(n, room, stride):
    windows = tuple(_windows(n, room, stride))
    flags = _max_context(windows)
    for w, (start, length) in enumerate(windows):
        assert flags[w] == [google_is_max_context(windows, w, start + i) for i in range(length)]


def test_questions_sharing_a_context_get_the_windows_each_would_get_alone(tokenizer):
    context = " ".join(WORDS * 3)
    questions = ["Where is it?", "Where?", "Where is it? Where is it?", "Where is it?"]
    examples = [
        QAExample(str(i), q, context, ["mike"], context.index("mike")) for i, q in enumerate(questions)
    ]
    together = featurize(examples, tokenizer, max_seq_len=24, doc_stride=8)
    for i, example in enumerate(examples):
        alone = featurize([example], tokenizer, max_seq_len=24, doc_stride=8)
        mine = [f for f, e in enumerate(together.example_index) if e == i]
        for name in ("input_ids", "token_type_ids", "offsets", "max_context", "positions"):
            assert [getattr(together, name)[f] for f in mine] == getattr(alone, name), name


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
