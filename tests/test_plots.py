"""Pictures: the training curves of a run, and attention heatmaps sized to their tokens."""

import json
from types import SimpleNamespace

import matplotlib.image
import numpy as np
import pytest

from nanobert.errors import NanobertError
from nanobert.use.plots import ATTENTION_DPI, attention_figure_inches, image_path, plot_attention, plot_curves


def test_curves_from_a_metrics_file(tmp_path):
    rows = [
        {"split": "train", "step": s, "loss": 5 - s / 10, "mlm_loss": 4 - s / 10, "nsp_loss": 0.7}
        for s in range(1, 11)
    ]
    rows += [{"split": "valid", "step": s, "mlm_loss": 4.5 - s / 20, "nsp_loss": 0.69, "mlm_accuracy": s / 50,
              "nsp_accuracy": 0.5} for s in (5, 10)]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = plot_curves(tmp_path / "metrics.jsonl", tmp_path / "curves.png")
    image = matplotlib.image.imread(out)
    assert image.shape[1] == 1100 and image[..., :3].std() > 0.05  # 11 in at 100 dpi, not blank


def test_attention_heatmaps_have_the_size_their_tokens_need(tmp_path):
    tokens = ["[CLS]", "alpha", "##s", "bravo", "[SEP]"]
    probs = np.random.default_rng(0).dirichlet(np.ones(5), size=(2, 3, 5))  # (L, nh, T, T), rows sum to 1
    maps = SimpleNamespace(tokens=tokens, probs=probs)
    for layer, head, rows, cols in ((None, None, 2, 3), (1, None, 1, 3), (None, 2, 2, 1), (0, 0, 1, 1)):
        path = plot_attention(maps, tmp_path / f"a{layer}{head}.png", layer=layer, head=head)
        h, w = matplotlib.image.imread(path).shape[:2]
        width, height = attention_figure_inches(tokens, rows, cols)
        assert abs(w - width * ATTENTION_DPI) <= 1 and abs(h - height * ATTENTION_DPI) <= 1
    with pytest.raises(NanobertError, match="layers 0..1"):
        plot_attention(maps, tmp_path / "x.png", layer=2)
    with pytest.raises(NanobertError, match="heads 0..2"):
        plot_attention(maps, tmp_path / "x.png", head=-1)


def test_a_picture_goes_where_it_says(tmp_path):
    """No suffix gets .png (the path returned, and printed by the CLI, is the file's); a directory or a
    suffix matplotlib cannot write is a one-line error before any drawing."""
    assert image_path(tmp_path / "sub" / "heads") == tmp_path / "sub" / "heads.png"
    assert (tmp_path / "sub").is_dir()
    assert image_path(tmp_path / "heads.svg").suffix == ".svg"
    with pytest.raises(NanobertError, match="must end in one of"):
        image_path(tmp_path / "heads.txt")
    with pytest.raises(NanobertError, match="must end in one of"):  # listed by matplotlib, but needs LaTeX
        image_path(tmp_path / "heads.pgf")
    with pytest.raises(NanobertError, match="is a directory"):
        image_path(tmp_path)
