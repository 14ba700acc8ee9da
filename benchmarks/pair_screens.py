"""Screens for the sentence-pair recipe: `quality.py` with a changed data or loss, by name.

Each screen changes one thing the data code or the loss does, here in the script, so a losing screen never
reaches the package; a winner moves into `data/` or `objectives/` and the recipe. Every other option is
`quality.py`'s, passed through after `--` (or, after `-- nanobert`, a command of the CLI):

    OMP_NUM_THREADS=1 python benchmarks/pair_screens.py --screen nsp-x4 -- --preset wikitext2-cpu \\
        --set num_hidden_layers=2 --max-steps 2500 --seeds 2 --tokenizer TOK --train $S/train.raw \\
        --valid $S/dev.raw --test $D/wiki.test.raw --glue $G --glue-tasks stsb --finetune-seeds 1 --keep RUNS

Screens:
- `balanced-batches`: length buckets hold as many true pairs as random ones. Random Bs are shorter, so plain
  buckets hold 22% to 94% true pairs and the next-sentence head's bias swings with every batch.
- `nsp-x4`: the NSP term weighted 4x in the training loss (held-out figures unchanged).

The screens that won are the recipe now, and need no script: `[CLS]` and `[MASK]` blank in the "what" half
(the roles start, `initialization.roles_init`) and the "what" heads' rows and the positions' "what" half kept
while pretraining (`keep_roles`, on in the recipes; `nanobert pretrain --set keep_roles=false` is the run
without it). The records that screened them (2026-12-04-pair-kept) name the commit their commands ran at.
"""

from __future__ import annotations

import dataclasses
import sys

import quality

from nanobert import cli
from nanobert.data import nsp
from nanobert.objectives import mlm_nsp as objective_file
from nanobert.objectives import registry


def balanced_batches() -> None:
    """Each length-sorted window interleaves the true and the random pairs by their length ranks, so a batch
    of consecutive instances is half of each (up to the window's own share)."""
    original = nsp.batches

    def patched(instances, batch_size, seed, epoch, drop_last=False, bucket=False):
        if not bucket:
            return original(instances, batch_size, seed, epoch, drop_last, bucket)
        rng = nsp.seeded_rng("batches", seed, epoch)
        order = list(range(len(instances)))
        rng.shuffle(order)
        window = 100 * batch_size
        for start in range(0, len(order), window):
            part = order[start : start + window]
            ranked = []
            for label in (0, 1):
                same = [j for j in part if instances[j].next_sentence_label == label]
                same.sort(key=lambda j: len(instances[j].input_ids))
                ranked += [((r + 0.5) / len(same), label, j) for r, j in enumerate(same)]
            order[start : start + window] = [j for _, _, j in sorted(ranked)]
        groups = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        if drop_last and groups and len(groups[-1]) < batch_size:
            groups.pop()
        rng.shuffle(groups)
        return [[instances[j] for j in group] for group in groups]

    nsp.batches = patched


def nsp_weight(weight: float):
    def install() -> None:
        original = objective_file.mlm_nsp_loss

        def patched(model, batch):
            out = original(model, batch)
            out["loss"] = out["mlm_loss"] + weight * out["nsp_loss"]
            return out

        objective_file.mlm_nsp_loss = patched
        registry.OBJECTIVES["mlm_nsp"] = dataclasses.replace(registry.OBJECTIVES["mlm_nsp"], loss=patched)

    return install


SCREENS = {"balanced-batches": balanced_batches, "nsp-x4": nsp_weight(4.0)}


def main() -> None:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    names = [a for a in argv[:split] if a != "--screen"]
    unknown = sorted(set(names) - set(SCREENS))
    if unknown:
        sys.exit(f"pair_screens.py: unknown screen(s) {', '.join(unknown)}; choose from {', '.join(SCREENS)}")
    for name in names:
        SCREENS[name]()
    rest = argv[split + 1 :]
    if rest[:1] == ["nanobert"]:  # the CLI itself, e.g. `-- nanobert pretrain ...`
        raise SystemExit(cli.main(rest[1:]))
    sys.argv = [sys.argv[0], *rest]
    quality.main()


if __name__ == "__main__":
    main()
