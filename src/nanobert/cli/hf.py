"""The commands to and from transformers: `export-hf` and `import-hf`."""

from __future__ import annotations

import json

from nanobert.cli.common import (
    command,
    emit,
)


def _add_export_hf(sub) -> None:
    help = "write a checkpoint as a transformers BertForPreTraining (or, causal, BertLMHeadModel) directory"
    p = command(sub, "export-hf", _cmd_export_hf, help)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("checkpoint", metavar="CKPT")
    p.add_argument("out", metavar="OUT")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it is not empty")


def _cmd_export_hf(args) -> int:
    from nanobert.checkpoints.checkpoint import read_config
    from nanobert.checkpoints.kinds import KINDS, checkpoint_kind
    from nanobert.hf.export_hf import export_hf

    out = export_hf(args.checkpoint, args.out, overwrite=args.overwrite)
    files = sorted(f.name for f in out.iterdir())
    text = f"wrote {out}: {', '.join(files)}\n"
    architecture = json.loads((out / "config.json").read_text())["architectures"][0]
    text += f"load it with transformers.{architecture}.from_pretrained({str(out)!r})"
    leaves_out = KINDS[checkpoint_kind(read_config(args.checkpoint))].hf_leaves_out
    if leaves_out:  # said plainly: what the checkpoint does that the exported class cannot
        text += f"\nnot exported: {leaves_out}"
    return emit(args, {"out": str(out), "files": files, "not_exported": leaves_out}, text)


def _add_import_hf(sub) -> None:
    help = "convert a transformers BERT directory into a nanobert checkpoint"
    p = command(sub, "import-hf", _cmd_import_hf, help)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "hf_dir", metavar="DIR", help="BertForPreTraining or BertModel weights with their tokenizer"
    )
    p.add_argument("out", metavar="OUT")
    p.add_argument("--seed", type=int, default=0, help="seed for any head initialised freshly")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it is not empty")


def _cmd_import_hf(args) -> int:
    from dataclasses import asdict

    from nanobert.hf.import_hf import import_hf

    result = import_hf(args.hf_dir, args.out, overwrite=args.overwrite, seed=args.seed)
    lines = [f"wrote {result.out}"]
    if result.fresh_heads:
        lines.append(
            f"initialised freshly (absent from {args.hf_dir}): {', '.join(result.fresh_heads)}; "
            "their outputs mean nothing until trained"
        )
    else:
        lines.append("every weight came from the source; nothing was initialised freshly")
    if result.vocab_remapped:
        lines.append(
            "vocabulary renumbered so that [PAD] [UNK] [CLS] [SEP] [MASK] are ids 0..4 "
            "(the model computes the same as before)"
        )
    return emit(args, {**asdict(result), "out": str(result.out)}, "\n".join(lines))


def add_commands(sub) -> None:
    _add_export_hf(sub)
    _add_import_hf(sub)
