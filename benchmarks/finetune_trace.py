"""Trace a fine-tuning run's first steps: what the head reads, and what reaches the encoder.

Runs the real `nanobert finetune` path (the same numbers as `nanobert glue CKPT --tasks TASK --seeds S`), with
hooks that record, every `--every` training steps up to `--trace-steps`:

- loss, and the predictions' spread across the batch (a stalled regression run predicts one score for all);
- `cls_spread`: how much the [CLS] final state varies across the batch's examples, ||X - mean X|| / ||X||
  (0: the same vector for every example, so a head on it cannot tell them apart);
- `pooled_spread`, `pooled_saturated`: the same for what the head reads (the pooler's tanh, or whatever the
  head reads), and the share of its units with |tanh| > 0.99 (derivative below 0.02);
- `meanpool_spread`: the same for the mean of the tokens' final states (what a mean-pooling head would read);
- `grad_*`: the gradient norm of each part (embeddings, each encoder layer, the pooler, the head) before
  clipping, and `head_weight` / `head_bias`: the head's weight norm and bias.

    python benchmarks/finetune_trace.py RUN/best --glue ../shared/data/glue --task stsb --seeds 1 2 3 \
        --out trace-s2 [--set learning_rate=1e-4 ...]

Writes OUT/seedN/ as finetune does (metrics.jsonl, summary.json, best/) and OUT/seedN-trace.jsonl, and prints
one line per seed: the dev metric and the trace at a few steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

import torch

from nanobert.cli.overrides import _parse_value
from nanobert.config import FinetuneConfig
from nanobert.finetuning.classification import ClassifierTask
from nanobert.finetuning.glue_tasks import GLUE_TASKS
from nanobert.finetuning.task import run_task


def spread(x: torch.Tensor) -> float:
    """||x - mean over rows|| / ||x||: the share of a batch's vectors (B, H) that differs between rows."""
    x = x.detach().float()
    return float((x - x.mean(0)).norm() / x.norm().clamp_min(1e-12))


class Tracer:
    """Hooks on a sequence classifier that keep one record per traced training step."""

    def __init__(self, model: torch.nn.Module, every: int, steps: int, path: Path):
        self.model, self.every, self.steps, self.path = model, every, steps, path
        self.step, self.record, self.grads = 0, None, {}
        self.file = path.open("w")
        model.bert.register_forward_hook(self.on_encoder)
        model.register_forward_hook(self.on_model)
        model.classifier.register_forward_pre_hook(self.on_head)
        for name, p in model.named_parameters():
            group = self.group(name)
            p.register_post_accumulate_grad_hook(lambda p, g=group: self.on_grad(g, p))

    @staticmethod
    def group(name: str) -> str:
        parts = name.split(".")
        if parts[0] == "bert" and parts[1] == "layers":
            return f"grad_layer{parts[2]}"
        if parts[0] == "bert":
            return f"grad_{parts[1]}"  # embeddings, pooler, final_layer_norm
        return "grad_head"

    def tracing(self) -> bool:
        return self.model.training and self.step < self.steps and self.step % self.every == 0

    def on_encoder(self, module, args, out) -> None:
        if not self.model.training:
            return
        self.flush()
        self.step += 1
        if not self.tracing():
            return
        mask = args[2] if len(args) > 2 else None
        mask = torch.ones(out.last_hidden_state.shape[:2]) if mask is None else mask
        h = out.last_hidden_state.detach().float()
        m = mask.to(h.dtype).unsqueeze(-1)
        meanpool = (h * m).sum(1) / m.sum(1)
        self.record = {"step": self.step, "cls_spread": spread(h[:, 0]), "meanpool_spread": spread(meanpool)}
        self.grads = {}

    def on_head(self, module, args) -> None:
        """What the head reads (after dropout, off for regression): its spread and saturation."""
        if self.record is not None and self.model.training:
            pooled = args[0].detach()
            self.record |= {
                "pooled_spread": spread(pooled),
                "pooled_saturated": float((pooled.abs() > 0.99).float().mean()),
            }

    def on_model(self, module, args, out) -> None:
        if self.record is None or not self.model.training:
            return
        logits = out.logits.detach().float()
        self.record |= {"loss": float(out.loss.detach()) if out.loss is not None else None,
                        "prediction_spread": float(logits.std(0).mean())}  # fmt: skip
        head = self.model.classifier
        self.record |= {"head_weight": float(head.weight.detach().norm()),
                        "head_bias": [round(float(b), 4) for b in head.bias.detach()]}  # fmt: skip

    def on_grad(self, group: str, p: torch.Tensor) -> None:
        if self.record is not None and p.grad is not None:
            self.grads[group] = self.grads.get(group, 0.0) + float(p.grad.detach().float().pow(2).sum())

    def flush(self) -> None:
        if self.record is None:
            return
        self.record |= {k: math.sqrt(v) for k, v in sorted(self.grads.items())}
        self.file.write(json.dumps(self.record) + "\n")
        self.file.flush()
        self.record = None


class TracedTask(ClassifierTask):
    """A classifier task whose model carries a Tracer."""

    def __init__(self, spec, every: int, steps: int, path: Path):
        super().__init__(spec)
        self.every, self.steps, self.path = every, steps, path

    def build(self, pretrained, from_scratch, cfg):
        model = super().build(pretrained, from_scratch, cfg)
        self.tracer = Tracer(model, self.every, self.steps, self.path)
        return model


def probe(checkpoint: str, folder: Path, task, train_rows: int = 4000) -> dict[str, float]:
    """How much of the task a linear read of the checkpoint's untouched encoder finds: ridge regression
    (lambda 1) on the features of `train_rows` training pairs, scored by Pearson on the dev pairs, for the
    [CLS] final state, the checkpoint's pooler on it, and the mean of every token's final state; and the
    same for the untrained start of the checkpoint's config (`--control scratch`'s model)."""
    import numpy as np

    from nanobert.checkpoints.checkpoint import checkpoint_tokenizer, load_language_model
    from nanobert.data.labelled import collate, load_split
    from nanobert.model import BertForPreTraining, BertModel

    pretrained, config = load_language_model(checkpoint, torch.device("cpu"))
    tokenizer = checkpoint_tokenizer(checkpoint, pretrained, config)
    spec = task.spec()
    train, _ = load_split(folder / "train.tsv", spec, tokenizer, 128, None)
    dev, _ = load_split(folder / "dev.tsv", spec, tokenizer, 128, None, folder / "train.tsv")

    def features(bert: BertModel, data) -> dict[str, np.ndarray]:
        out: dict[str, list] = {"cls": [], "pooled_cls": [], "mean": []}
        with torch.no_grad():
            for start in range(0, len(data), 128):
                batch = collate(data, np.arange(start, min(start + 128, len(data))))
                batch.pop("labels", None)
                enc = bert(**batch)
                h, m = enc.last_hidden_state, batch.get("attention_mask")
                m = torch.ones(h.shape[:2]) if m is None else m.float()
                out["cls"].append(h[:, 0])
                out["pooled_cls"].append(enc.pooler_output)
                out["mean"].append((h * m.unsqueeze(-1)).sum(1) / m.sum(1, keepdim=True))
        return {k: torch.cat(v).numpy().astype(np.float64) for k, v in out.items()}

    def ridge(x, y, xd, yd) -> float:
        mu, sd = x.mean(0), x.std(0) + 1e-6
        x, xd = (x - mu) / sd, (xd - mu) / sd
        x1, xd1 = np.c_[x, np.ones(len(x))], np.c_[xd, np.ones(len(xd))]
        w = np.linalg.solve(x1.T @ x1 + np.eye(x1.shape[1]), x1.T @ y)
        return float(np.corrcoef(xd1 @ w, yd)[0, 1])

    rows = np.random.default_rng(0).permutation(len(train.data))[:train_rows]
    sub = type(train.data)([train.data.input_ids[i] for i in rows],
                           [train.data.token_type_ids[i] for i in rows], train.data.labels[rows])  # fmt: skip
    result = {}
    torch.manual_seed(0)
    untrained = BertForPreTraining(pretrained.config).bert  # the config's start: roles attention etc.
    for name, bert in (("checkpoint", pretrained.bert), ("untrained", untrained)):
        bert.eval()
        ft, fd = features(bert, sub), features(bert, dev.data)
        for k in ft:
            result[f"{name}_{k}"] = ridge(ft[k], sub.labels, fd[k], dev.data.labels)
    return result


def summarise(folders: list[str], upto: int = 600) -> list[dict]:
    """One row per traced run in `folders` (OUT/seedN-trace.jsonl beside OUT/seedN/summary.json): the dev
    metric, the last logged training loss, and over the traced steps up to `upto` the mean of what the head
    reads (spread, saturation), of the [CLS] and mean-of-tokens spreads, of the predictions' spread, and of
    each part's gradient norm, with the top layer's gradient over the bottom layer's; the head's weight norm
    at the last traced step."""
    rows = []
    for folder in map(Path, folders):
        for trace in sorted(folder.glob("seed*-trace.jsonl")):
            seed = trace.name.removesuffix("-trace.jsonl")
            if not (folder / seed / "summary.json").is_file():
                continue  # still running
            summary = json.loads((folder / seed / "summary.json").read_text())
            records = [json.loads(line) for line in trace.read_text().splitlines()]
            records = [r for r in records if r["step"] <= upto]
            losses = [json.loads(line) for line in (folder / seed / "metrics.jsonl").read_text().splitlines()]
            train = [r["loss"] for r in losses if r.get("split") == "train"]

            def mean(key: str, records: list[dict] = records) -> float:
                return sum(r.get(key, 0.0) for r in records) / len(records)

            layers = sorted(k for k in records[0] if k.startswith("grad_layer"))
            row = {
                "run": folder.name,
                "seed": int(seed.removeprefix("seed")),
                "pooling": summary["finetune"].get("pooling") or "cls",  # traced before the choice: cls
                "dev": summary["dev"][summary["metric"]],
                "last_train_loss": train[-1],
                "pooled_spread": mean("pooled_spread"),
                "pooled_saturated": mean("pooled_saturated"),
                "cls_spread": mean("cls_spread"),
                "meanpool_spread": mean("meanpool_spread"),
                "prediction_spread": mean("prediction_spread"),
                **{k: mean(k) for k in ("grad_embeddings", *layers, "grad_pooler", "grad_head")},
                "top_over_bottom": mean(layers[-1]) / mean(layers[0]),
                "head_weight": records[-1]["head_weight"],
            }
            rows.append(row)
    return rows


def write_summary(folders: list[str], path: str) -> None:
    """`summarise(folders)` as a CSV at `path`, and a line per run."""
    import csv

    rows = summarise(folders)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()} for r in rows)
    for r in rows:
        print(
            f"{r['run']:28s} seed {r['seed']} {r['pooling']:4s} dev {r['dev']:.3f} "
            f"loss {r['last_train_loss']:.2f} reads {r['pooled_spread']:.3f} cls {r['cls_spread']:.3f} "
            f"mean {r['meanpool_spread']:.3f} top/bottom {r['top_over_bottom']:.2f} "
            f"emb {r['grad_embeddings']:.2f} head {r['head_weight']:.3f}"
        )


def trace_seeds(args, task, folder: Path) -> None:
    """The traced runs of `args.seeds`, a line each: the dev metric and the trace at a few steps."""
    files = {"train": folder / "train.tsv", "dev": folder / "dev.tsv", "test": None}
    types = {f.name: f.type for f in dataclasses.fields(FinetuneConfig)}
    sets = dict(pair.split("=", 1) for pair in args.set)
    base = FinetuneConfig(**{k: _parse_value(v, types[k], k) for k, v in sets.items()})
    for seed in args.seeds:
        out, trace = Path(args.out) / f"seed{seed}", Path(args.out) / f"seed{seed}-trace.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        cfg = dataclasses.replace(base, seed=seed, metric=base.metric or task.select)
        traced = TracedTask(task.spec(), args.every, args.trace_steps, trace)
        summary = run_task(traced, args.checkpoint, files, out, cfg,
                           from_scratch=args.scratch, overwrite=True, quiet=True)  # fmt: skip
        traced.tracer.flush()
        rows = [json.loads(line) for line in trace.read_text().splitlines()]
        at = {r["step"]: r for r in rows}
        marks = [s for s in (1, 101, 201, 401, 591) if s in at]
        cells = "  ".join(
            f"@{s}: loss {at[s]['loss']:.2f} pred {at[s]['prediction_spread']:.3f} "
            f"pooled {at[s].get('pooled_spread', float('nan')):.3f} cls {at[s]['cls_spread']:.3f}"
            for s in marks
        )
        print(f"seed {seed}: dev {summary['metric']} {summary['dev'][summary['metric']]:.4f}  {cells}",
              flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint", nargs="?")
    ap.add_argument("--glue", help="the GLUE data folder (glue_data layout)")
    ap.add_argument("--task", default="stsb")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--scratch", action="store_true", help="the from-scratch control instead")
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--trace-steps", type=int, default=600)
    ap.add_argument("--out", required=True)
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="FinetuneConfig fields")
    ap.add_argument("--probe", action="store_true", help="only the linear probe of the untouched encoder")
    ap.add_argument("--summarise", nargs="+", metavar="DIR", help="only a table of earlier traces' --out")
    args = ap.parse_args()
    if args.summarise:
        return write_summary(args.summarise, args.out)
    task = GLUE_TASKS[args.task]
    folder = Path(args.glue) / task.name
    if args.probe:
        result = probe(args.checkpoint, folder, task)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"checkpoint": args.checkpoint, **result}, indent=1) + "\n")
        print("  ".join(f"{k} {v:.3f}" for k, v in result.items()))
        return
    trace_seeds(args, task, folder)


if __name__ == "__main__":
    main()
