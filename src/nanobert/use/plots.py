"""Pictures: training curves from metrics.jsonl, attention heatmaps and BLiMP bars, with matplotlib.

`curves_figure` draws losses (train and held-out) and held-out accuracies; `attention_figure` draws attention
probabilities with the word pieces on both axes, one heatmap per layer and head. Both return a Figure made
without pyplot (no global backend is touched, so a notebook keeps showing plots inline); `plot_curves` and
`plot_attention` save them as files. `plot_blimp` saves BLiMP accuracies as bars.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nanobert.errors import NanobertError
from nanobert.files import atomic_file, check_output_file


def curves_figure(metrics_path: str | Path) -> Any:
    """A matplotlib Figure of a run's curves, from its metrics.jsonl: left, the losses (train and held-out,
    whichever the run logged: MLM and NSP, or the next-word loss); right, the held-out accuracies.

    A `matplotlib.figure.Figure` made without pyplot, so drawing it changes no global backend: a notebook
    shows it inline, `plot_curves` saves it.
    """
    from matplotlib.figure import Figure  # no pyplot: no global state, no display needed

    rows = [json.loads(line) for line in Path(metrics_path).read_text().splitlines() if line.strip()]
    train = [r for r in rows if r["split"] == "train"]
    held = [r for r in rows if r["split"] != "train"]
    split_name = held[0]["split"] if held else "held-out"
    losses = [k for k in dict.fromkeys(k for r in rows for k in r) if k.endswith("_loss")]
    accuracies = [k for k in dict.fromkeys(k for r in held for k in r) if k.endswith("_accuracy")]
    fig = Figure(figsize=(11, 4))
    ax_loss, ax_acc = fig.subplots(1, 2)
    for i, key in enumerate(losses):
        style = "-" if i % 2 == 0 else "--"
        for part, name, marker in ((train, "train", ""), (held, split_name, "o")):
            points = [(r["step"], r[key]) for r in part if key in r]
            if points:
                ax_loss.plot(*zip(*points, strict=True), style + marker, markersize=3, label=f"{name} {key}")
    for key in accuracies:
        points = [(r["step"], r[key]) for r in held if key in r]
        ax_acc.plot(*zip(*points, strict=True), "o-", markersize=3, label=f"{split_name} {key}")
    for ax, title, ylabel in ((ax_loss, "losses", "loss"), (ax_acc, f"{split_name} accuracy", "accuracy")):
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        if ax.lines:
            ax.legend(fontsize=8)
    ax_acc.set_ylim(0, 1)
    fig.tight_layout()
    return fig


def save_figure(fig: Any, out_path: str | Path, dpi: int = 100) -> Path:
    """Write `fig` to `out_path` in the format its suffix names (PNG without one), through a temporary file:
    a failed write keeps the old picture."""
    out_path = Path(out_path)
    with atomic_file(out_path, "wb") as f:
        fig.savefig(f, dpi=dpi, format=out_path.suffix[1:].lower() or "png")
    return out_path


def plot_curves(metrics_path: str | Path, out_path: str | Path) -> Path:
    """Draw `curves_figure(metrics_path)` to the PNG `out_path` (a run's curves.png)."""
    return save_figure(curves_figure(metrics_path), out_path)


# Figure geometry: one square heatmap per (layer, head), scaled with the number of tokens, plus room for the
# token labels on both axes and the title. Exposed so callers (and tests) know the PNG's size before drawing.
ATTENTION_DPI = 100


def _heatmap_inches(num_tokens: int) -> float:
    return max(1.6, 0.16 * num_tokens)  # the side of one T x T heatmap: about 0.16 in per token


def _label_fontsize(num_tokens: int) -> float:
    """Token labels in points: 70% of the spacing between rows, at most 9 pt."""
    return min(9.0, 0.7 * 72 * _heatmap_inches(num_tokens) / max(num_tokens, 1))


def attention_figure_inches(tokens: list[str], rows: int, cols: int) -> tuple[float, float]:
    """(width, height) in inches of the attention figure: `rows` layers by `cols` heads over `tokens`."""
    side = _heatmap_inches(len(tokens))
    label = max(len(t) for t in tokens) * _label_fontsize(len(tokens)) * 0.65 / 72 + 0.2  # tick labels
    return cols * (side + label + 0.2), rows * (side + label + 0.4) + 0.4  # + titles; 0.4 in suptitle


def attention_figure(
    maps: Any, layer: int | None = None, head: int | None = None, dpi: int = ATTENTION_DPI
) -> Any:
    """A matplotlib Figure of attention heatmaps (query tokens down the side, key tokens along the bottom).

    `maps` has `tokens` (T word pieces) and `probs` (L, nh, T, T), as `inference.AttentionMaps` does.
    With `layer` and `head`, one map; with one of them, that layer's heads or that head in every layer;
    with neither, a grid of every layer (rows) by every head (columns). Layers and heads count from 0.
    Made without pyplot (a notebook shows it inline); `plot_attention` saves it.
    """
    from matplotlib.figure import Figure  # no pyplot: no global state, no display needed

    L, nh, T, _ = maps.probs.shape
    if layer is not None and not 0 <= layer < L:
        raise NanobertError(f"--layer {layer} is out of range; this model has layers 0..{L - 1}")
    if head is not None and not 0 <= head < nh:
        raise NanobertError(f"--head {head} is out of range; this model has heads 0..{nh - 1}")
    layers = [layer] if layer is not None else list(range(L))
    heads = [head] if head is not None else list(range(nh))
    width, height = attention_figure_inches(maps.tokens, len(layers), len(heads))
    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    axes = fig.subplots(len(layers), len(heads), squeeze=False)
    fontsize = _label_fontsize(T)
    for r, li in enumerate(layers):
        for c, hi in enumerate(heads):
            ax = axes[r][c]
            # aspect="auto": the figure geometry already makes each cell square, and a fixed aspect would
            # let the layout engine place labels for a box the heatmap no longer fills.
            ax.imshow(maps.probs[li, hi], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            ax.set_title(f"layer {li} head {hi}", fontsize=9)
            ax.set_xticks(range(T))
            ax.set_yticks(range(T))
            ax.set_xticklabels(maps.tokens, rotation=90, fontsize=fontsize)
            ax.set_yticklabels(maps.tokens, fontsize=fontsize)
    fig.suptitle("attention probabilities (rows: query token, columns: attended token)", fontsize=10)
    return fig


def plot_attention(
    maps: Any,
    out_path: str | Path,
    layer: int | None = None,
    head: int | None = None,
    dpi: int = ATTENTION_DPI,
) -> Path:
    """Draw `attention_figure(maps, layer, head)` to a PNG (or another format matplotlib writes); the path
    is checked before any drawing."""
    out_path = image_path(out_path)
    return save_figure(attention_figure(maps, layer, head, dpi), out_path, dpi)


def plot_blimp(
    groups: dict[str, float],
    overall: float,
    out_path: str | Path,
    published: dict[str, float] | None = None,
    filtered: dict[str, float] | None = None,
    title: str = "BLiMP accuracy by phenomenon",
) -> Path:
    """A horizontal bar per group (BLiMP phenomena, accuracies in 0..1), the overall accuracy as the first
    bar, chance (50%) and each `published` model's overall figure (in %) as vertical lines; with `filtered`,
    a second, thinner bar per group for the pairs BabyLM's vocabulary filter keeps."""
    from matplotlib.figure import Figure

    out_path = image_path(out_path)
    names = ["overall", *groups]
    values = [overall, *groups.values()]
    fig = Figure(figsize=(8, 0.32 * len(names) + 1.4), dpi=100, layout="constrained")
    ax = fig.subplots()
    rows = range(len(names))[::-1]  # the first name at the top
    height = 0.4 if filtered else 0.7
    ax.barh([r + height / 2 if filtered else r for r in rows], [100 * v for v in values], height, label="all")
    if filtered:
        kept = [filtered.get("overall", float("nan")), *(filtered.get(k, float("nan")) for k in groups)]
        ax.barh([r - height / 2 for r in rows], [100 * v for v in kept], height, label="known words only")
    ax.axvline(50, color="black", linestyle=":", linewidth=1, label="chance")
    for (name, value), style in zip((published or {}).items(), ("--", "-.", (0, (5, 1)), "-"), strict=False):
        ax.axvline(value, color="grey", linestyle=style, linewidth=1, label=f"{name} {value:.1f}")
    ax.set_yticks(list(rows))
    ax.set_yticklabels(names, fontsize=8)
    ax.set_xlim(0, 100)
    ax.set_xlabel("accuracy (%)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    return save_figure(fig, out_path)


def image_path(out_path: str | Path) -> Path:
    """Where a picture goes: `out_path` (its folder made), with `.png` added when it has no suffix. An
    existing directory or a suffix matplotlib cannot write is a NanobertError, before any work."""
    out_path = check_output_file(out_path)
    if not out_path.suffix:
        out_path = check_output_file(out_path.with_suffix(".png"))
    from matplotlib.backend_bases import FigureCanvasBase

    # pgf is listed but needs a LaTeX install (xelatex) to write
    formats = {k for k in FigureCanvasBase.get_supported_filetypes() if k != "pgf"}
    if out_path.suffix[1:].lower() not in formats:
        raise NanobertError(f"output {out_path}: a picture must end in one of .{', .'.join(sorted(formats))}")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    return out_path


__all__ = [
    "ATTENTION_DPI",
    "attention_figure",
    "attention_figure_inches",
    "curves_figure",
    "image_path",
    "plot_attention",
    "plot_blimp",
    "plot_curves",
]
