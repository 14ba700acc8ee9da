"""Training curves from metrics.jsonl: losses (train and held-out) and held-out accuracies, as one PNG."""

from __future__ import annotations

import json
from pathlib import Path


def plot_curves(metrics_path: str | Path, out_path: str | Path) -> Path:
    """Draw curves.png: left, train loss / MLM / NSP and held-out MLM / NSP loss; right, held-out accuracy."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in Path(metrics_path).read_text().splitlines() if line.strip()]
    train = [r for r in rows if r["split"] == "train"]
    valid = [r for r in rows if r["split"] == "valid"]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    for key, style in (("mlm_loss", "-"), ("nsp_loss", "--")):
        if train:
            ax_loss.plot([r["step"] for r in train], [r[key] for r in train], style, label=f"train {key}")
        if valid:
            ax_loss.plot(
                [r["step"] for r in valid],
                [r[key] for r in valid],
                style + "o",
                markersize=3,
                label=f"held-out {key}",
            )
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("loss")
    ax_loss.set_title("losses")
    ax_loss.legend(fontsize=8)
    for key in ("mlm_accuracy", "nsp_accuracy"):
        if valid:
            ax_acc.plot(
                [r["step"] for r in valid],
                [r[key] for r in valid],
                "o-",
                markersize=3,
                label=f"held-out {key}",
            )
    ax_acc.set_xlabel("step")
    ax_acc.set_ylabel("accuracy")
    ax_acc.set_ylim(0, 1)
    ax_acc.set_title("held-out accuracy")
    ax_acc.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return Path(out_path)


__all__ = ["plot_curves"]
