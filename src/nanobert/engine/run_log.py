"""What a run writes besides checkpoints: metrics.jsonl, progress on stderr, summary.json, and the guard that
keeps two runs out of one output directory.

Reading a run's files back is `checkpoints/run_files.py`'s (the browser page reads them without loading this
module). Every job (pretraining, fine-tuning) logs through `RunLog` and checks its `--out` with
`prepare_out_dir`, so they share one file format (one JSON object per line with a `split` and a `step`) and
one rule for reusing a directory: never mix two runs, never delete anything before that check.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from tqdm.std import tqdm

from nanobert.checkpoints.run_files import (
    METRICS_NAME,
    SUMMARY_NAME,
    read_records,
    read_summary,
    scan_records,
)
from nanobert.device import software_versions
from nanobert.errors import NanobertError, raise_user_os_error
from nanobert.files import atomic_file, check_output_folder, check_room, within
from nanobert.tokenizer import tokenizer_digest

CURVES_NAME = "curves.png"
# What marks a directory as holding a run ("adapt": a fine-tuning run's adaptation, even one interrupted)
RUN_ARTEFACTS = (METRICS_NAME, SUMMARY_NAME, "best", "last", "adapt", "predictions.json")  # the last: QA's


def prepare_out_dir(
    out_dir: Path,
    overwrite: bool,
    *,
    resumable: bool = True,
    create: bool = True,
    inputs: tuple = (),
    need: int = 0,
) -> None:
    """Refuse to mix two runs in one directory unless asked, or a run with a folder of other files; never
    delete anything before those checks and the check that `out_dir` can be written with `need` bytes free
    (what the job's first checkpoint takes).

    With `overwrite`, the old run's logs go (its checkpoints are replaced atomically when the new run saves).
    `create=False` only checks (a job checks before loading its data, and creates once the data loaded; the
    other ranks of a data-parallel run only check). `resumable` adds "--resume" to the advice. `inputs`
    (paths the job reads, such as the checkpoint it fine-tunes) may not lie in what a new run replaces.
    """
    check_output_folder(out_dir, METRICS_NAME)
    for source in filter(None, inputs):
        if within(out_dir, source):  # a run written inside the checkpoint it starts from
            raise NanobertError(f"output {out_dir} lies inside the input {source}; choose another --out")
        if any(within(source, out_dir / name) for name in RUN_ARTEFACTS):
            raise NanobertError(
                f"{source} belongs to the run in {out_dir}, which this job would replace; choose another "
                "--out"
            )
    if any((out_dir / name).exists() for name in RUN_ARTEFACTS):
        if not overwrite:
            resume = f"--resume {out_dir}/last to continue it, " if resumable else ""
            raise NanobertError(
                f"{out_dir} already holds a run; pass --overwrite to replace it, {resume}"
                "or choose another --out"
            )
    elif out_dir.is_dir() and any(not p.name.startswith(".") for p in out_dir.iterdir()):
        raise NanobertError(  # as check_output_dir refuses for export-hf: a mistyped --out mixes in nothing
            f"{out_dir} already exists and holds other files, not a run; choose another --out (a new or "
            "empty folder)"
        )
    check_room(out_dir, need, "run's checkpoint")
    if create:
        for name in (METRICS_NAME, SUMMARY_NAME, CURVES_NAME):
            (out_dir / name).unlink(missing_ok=True)
        out_dir.mkdir(parents=True, exist_ok=True)


def checkpoint_bytes(model: Any, trainer_state: bool) -> int:
    """About what a checkpoint of `model` takes: its weights, and with `trainer_state` AdamW's two moments."""
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    vocabulary = 40 * model.config.vocab_size  # tokenizer.json and vocab.txt: some 40 bytes a word
    return weights * (3 if trainer_state else 1) + vocabulary


def write_summary(out_dir: Path, summary: dict[str, Any]) -> Path:
    path = out_dir / SUMMARY_NAME
    with atomic_file(path) as f:  # the page reads it while it is written: never half a summary
        f.write(json.dumps(summary, indent=2) + "\n")
    return path


def in_notebook() -> bool:
    """True inside a Jupyter kernel, whose stderr is no terminal but redraws a progress bar in place."""
    ipython = sys.modules.get("IPython")  # never imported here: a kernel has always imported it already
    shell = ipython.get_ipython() if ipython is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"


class RunLog:
    """metrics.jsonl plus human-readable progress on stderr (a tqdm bar on a terminal or in a Jupyter
    notebook, plain lines otherwise). The bar is tqdm's text bar, not a widget, so a saved notebook keeps it.

    Progress goes to stderr so that stdout carries only the command's result (JSON). With `write=False` (the
    other ranks of a data-parallel run) nothing is written at all.
    """

    def __init__(
        self, out_dir: Path, total_steps: int | None, start_step: int, quiet: bool = False, write: bool = True
    ):
        self.path = out_dir / METRICS_NAME
        self.quiet, self.write = quiet or not write, write
        self.bar = None
        if not self.quiet and (sys.stderr.isatty() or in_notebook()):
            self.bar = tqdm(
                total=total_steps, initial=start_step, unit="step", dynamic_ncols=True, file=sys.stderr
            )

    def continue_from(self, step: int, earlier: Path | None = None) -> None:
        """Keep the records up to `step` (a resumed run rewrites the later ones). `earlier` is the
        metrics.jsonl of the run being resumed when it lives in another directory: its records up to `step`
        are copied here first, so the new directory holds the whole run."""
        if not self.write:
            return
        source = earlier if earlier is not None and earlier.resolve() != self.path.resolve() else self.path
        kept = [r for r in read_records(source) if r["step"] <= step]
        with atomic_file(self.path) as f:  # a failed rewrite keeps the records as they were
            f.write("".join(json.dumps(r) + "\n" for r in kept))

    def record(self, entry: dict[str, Any]) -> None:
        if not self.write:
            return
        try:  # appended: a failure leaves at most a part of this line, which readers skip
            with open(self.path, "a") as f:
                f.write(json.dumps(entry) + "\n")
        except OSError as e:
            raise_user_os_error(e, self.path)
            raise

    def say(self, text: str) -> None:
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)  # tqdm.write's default is stdout
        else:
            print(text, file=sys.stderr, flush=True)

    def progress(self, step: int, total: int | None, loss: float, tokens_per_s: float, eta_s: float | None):
        if self.quiet:
            return
        if self.bar is not None:
            if total is not None and self.bar.total != total:
                self.bar.total = total
            self.bar.n = step
            self.bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens_per_s:,.0f}")
            self.bar.refresh()
        else:
            eta = f"{eta_s:5.0f}s" if eta_s is not None else "    ?"
            of = f"/{total}" if total else ""
            print(
                f"step {step}{of}  loss {loss:.4f}  tokens/s {tokens_per_s:,.0f}  eta {eta}",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def reproduced_by(cfg: Any, tokenizer: Tokenizer) -> str:
    """The log line that says what a rerun must match to give a run's numbers (docs/training.md): the seed,
    the tokenizer, the thread count and the versions; a time budget's steps follow the clock."""
    versions = ", ".join(f"{name} {v}" for name, v in software_versions().items() if name != "python")
    clock = (
        " (a time budget: the steps follow the clock; --max-steps repeats a run)" if cfg.time_budget else ""
    )
    return (
        f"the same command reproduces this run{clock} with seed {cfg.seed}, tokenizer "
        f"{tokenizer_digest(tokenizer)[:12]} ({tokenizer.get_vocab_size()} pieces), "
        f"{torch.get_num_threads()} threads, {versions}"
    )


__all__ = [
    "reproduced_by",
    "CURVES_NAME",
    "METRICS_NAME",
    "RUN_ARTEFACTS",
    "SUMMARY_NAME",
    "RunLog",
    "checkpoint_bytes",
    "in_notebook",
    "prepare_out_dir",
    "read_records",
    "read_summary",
    "scan_records",
    "write_summary",
]
