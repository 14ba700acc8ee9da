"""Fine-tuning metrics against hand-worked cases and against scipy."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobert.use.metrics import accuracy as accuracy_score
from nanobert.use.metrics import (
    average_ranks,
    compute_metrics,
    macro_f1,
    matthews_corrcoef,
    pearson,
    spearman,
)


def test_classification_metrics_by_hand():
    assert accuracy_score([0, 1, 1, 0], [0, 1, 0, 0]) == 0.75
    # F1 per class: 0 -> 2*1/(2+2) = 0.5, 1 -> 2*2/(2+3) = 0.8, 2 -> 0 (no true positive); mean 1.3/3.
    y_true, y_pred = [0, 0, 1, 1, 2], [0, 1, 1, 1, 0]
    assert macro_f1(y_true, y_pred) == pytest.approx(1.3 / 3)
    # Gorodkin: t = (2, 2, 1), p = (2, 3, 0), c = 3, s = 5 -> (15 - 10) / sqrt((25 - 13) (25 - 9)).
    assert matthews_corrcoef(y_true, y_pred) == pytest.approx(5 / np.sqrt(192))
    # Binary: TP 2, FN 1, TN 3, FP 1 -> (2*3 - 1*1) / sqrt(3 * 3 * 4 * 4) = 5/12.
    assert matthews_corrcoef([1, 1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 1, 0]) == pytest.approx(5 / 12)
    assert matthews_corrcoef([0, 1, 0, 1], [1, 1, 1, 1]) == 0.0  # one predicted class: undefined -> 0
    assert matthews_corrcoef([0, 1, 2], [0, 1, 2]) == pytest.approx(1.0)
    assert macro_f1([0, 1, 2], [0, 1, 2]) == 1.0


def test_regression_metrics_by_hand():
    assert pearson([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    assert pearson([1, 1, 1], [1, 2, 3]) == 0.0
    assert list(average_ranks([10, 20, 20, 5])) == [2.0, 3.5, 3.5, 1.0]
    # ranks (1, 2.5, 2.5, 4) and (1, 3, 2, 4): 4.5 / sqrt(4.5 * 5)
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / np.sqrt(22.5))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.floats(-5, 5)), min_size=3, max_size=30))
def test_metrics_match_scipy(pairs):
    stats = pytest.importorskip("scipy.stats")
    x = np.array([p[0] for p in pairs], dtype=float)
    y = np.array([p[1] for p in pairs])
    assert np.allclose(average_ranks(x), stats.rankdata(x))
    if np.ptp(x) > 0 and np.ptp(y) > 1e-9 and np.ptp(stats.rankdata(y)) > 0:
        assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-9)
        assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-9)
    assert spearman(x, np.exp(x)) == pytest.approx(1.0 if np.ptp(x) > 0 else 0.0)  # rank-invariant


def test_compute_metrics_reads_logits_or_scores():
    logits = np.array([[2.0, 1.0], [0.0, 3.0], [1.0, 0.5]])  # predicts 0, 1, 0
    assert compute_metrics("classification", logits, np.array([0, 1, 1])) == {
        "accuracy": pytest.approx(2 / 3),
        "macro_f1": pytest.approx(2 / 3),  # each class: TP 1 and one FP or FN -> 2 / (2 + 1)
        "mcc": pytest.approx(0.5),  # TP 1, TN 1, FP 0, FN 1: (1 - 0) / sqrt(1 * 2 * 1 * 2)
    }
    scores = compute_metrics("regression", np.array([[1.0], [2.0], [3.0]]), np.array([1.0, 2.0, 4.0]))
    assert scores["mse"] == pytest.approx(1 / 3) and scores["spearman"] == pytest.approx(1.0)


def test_squad_normalisation_exact_match_and_f1_by_hand():
    from nanobert.use.metrics import exact_match, f1_score, normalize_answer, squad_scores

    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert normalize_answer("an apple, a pear and the fig.") == "apple pear and fig"
    assert exact_match("the Denver Broncos", "Denver Broncos.") == 1.0
    # prediction "Denver Broncos team" vs gold "Broncos": overlap 1, precision 1/3, recall 1 -> F1 0.5
    assert f1_score("Denver Broncos team", "Broncos") == pytest.approx(0.5)
    assert f1_score("a b c", "b c d") == pytest.approx(0.8)  # "a" is an article: pred (b, c), gold (b, c, d)
    assert f1_score("cat cat", "cat") == pytest.approx(2 * 0.5 * 1 / 1.5)  # counts, not sets
    # evaluate-v1.1.py: F1 is 0 without a common token, even for two empty answers; EM compares the strings
    assert f1_score("", "") == 0.0 and f1_score(".", "the") == 0.0 and exact_match(".", "the") == 1.0
    # evaluate-v2.0.py: an empty side agrees only with an empty side (the no-answer case)
    assert f1_score("", "", version_2=True) == 1.0 and f1_score("x", "", version_2=True) == 0.0
    assert f1_score("", "x", version_2=True) == 0.0
    assert f1_score("a b c", "b c d", version_2=True) == pytest.approx(0.8)  # the same where both have words
    for version_2 in (False, True):
        scores = squad_scores(
            {"q1": "Denver Broncos", "q2": "Santa Clara", "q4": "wrong"},
            {"q1": ["Denver Broncos", "The Broncos"], "q2": ["Levi's Stadium", "Santa Clara, California"],
             "q4": ["right"], "q5": ["never answered"]},
            version_2=version_2,
        )  # fmt: skip
        # q1 exact; q2 F1 against its best gold 2 * (1 * 2/3) / (1 + 2/3) = 0.8; q4 wrong, q5 unanswered: 0
        assert scores["exact_match"] == pytest.approx(100 * 1 / 4)
        assert scores["f1"] == pytest.approx(100 * (1 + 0.8) / 4)


def test_squad_v1_and_v2_rules_differ_where_an_answer_normalises_to_nothing():
    from nanobert.use.metrics import squad_scores

    predictions = {"dot": "", "dot-or-city": "", "city": "Paris", "none": "", "none-guess": "Paris"}
    golds = {
        "dot": ["."],  # a gold answer that normalises to nothing
        "dot-or-city": [".", "Paris"],
        "city": ["the city of Paris", "."],
        "none": [],  # unanswerable (only in 2.0 data)
        "none-guess": [],
    }
    # v1.1 keeps every gold answer and takes the max: "" vs "." -> EM 1 (both normalise to ""), F1 0 (no
    # common token); "Paris" vs "the city of Paris" -> EM 0, F1 2 * (1 * 1/3) / (1 + 1/3) = 0.5; a question
    # with no gold answer at all scores 0.
    # dot: EM 1 F1 0; dot-or-city: EM 1 F1 0; city: EM 0 F1 0.5; none: 0 0; none-guess: 0 0
    v1 = squad_scores(predictions, golds)
    assert v1 == {"exact_match": pytest.approx(100 * 2 / 5), "f1": pytest.approx(100 * 0.5 / 5)}
    # 2.0 drops "." from every gold list: "dot" is left with none, so it is unanswerable and "" is right
    # (EM 1, F1 1); "dot-or-city" has only "Paris" left, which "" misses (0, 0); city: EM 0 F1 0.5;
    # none: "" is right (1, 1); none-guess: an answer to an unanswerable question (0, 0)
    v2 = squad_scores(predictions, golds, version_2=True)
    assert v2 == {"exact_match": pytest.approx(100 * 2 / 5), "f1": pytest.approx(100 * 2.5 / 5)}
    # and where the two agree on EM but not F1, a prediction of "." itself: v1.1 EM 1 F1 0; 2.0 EM 1 F1 1
    assert squad_scores({"q": "."}, {"q": ["."]}) == {"exact_match": 100.0, "f1": 0.0}
    assert squad_scores({"q": "."}, {"q": ["."]}, version_2=True) == {"exact_match": 100.0, "f1": 100.0}
