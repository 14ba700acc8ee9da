"""Screens for a recipe that keeps the pair: `quality.py` with a changed start or training, by name.

Each screen changes one thing the model file or the data code does, here in the script, so a losing screen
never reaches the package; a winner moves into `model.py` or `data/` and the recipe. Every other option is
`quality.py`'s, passed through after `--` (or, after `-- nanobert`, a command of the CLI):

    OMP_NUM_THREADS=1 python benchmarks/pair_screens.py --screen blank-specials -- --preset wikitext2-cpu \\
        --set num_hidden_layers=2 --max-steps 2500 --seeds 2 --tokenizer TOK --train $S/train.raw \\
        --valid $S/dev.raw --test $D/wiki.test.raw --glue $G --glue-tasks stsb --finetune-seeds 1 --keep RUNS

Screens:
- `blank-specials`: the `[CLS]` and `[MASK]` token rows start with nothing in the half the "what" heads
  read, so those heads give them no identity: a `[MASK]` no longer matches every other `[MASK]` (a third of a
  recipe's tokens) and `[CLS]` no longer matches only itself. The model's start does this now (`roles_init`),
  so on today's code the screen changes nothing; it names the rows of the record that screened it.
- `roles-before`: the roles start before the specials' rows were blanked (a control).
- `blank-uncentred`: `roles-before`, then the rows blanked: today's start (a centred variant of the "what"
  heads was screened and not kept).
- `balanced-batches`: length buckets hold as many true pairs as random ones. Random Bs are shorter, so plain
  buckets hold 22% to 94% true pairs and the next-sentence head's bias swings with every batch.
- `nsp-x4`: the NSP term weighted 4x in the training loss (held-out figures unchanged).
- `frozen-match`: the "what" heads' query and key rows (weights and biases) keep their start: their
  gradients are zeroed, so the word match can only fade through the embeddings and LayerNorms it reads.
  Run it with `-- nanobert pretrain ...`: in quality.py the fine-tuning would be frozen too.
- `confined-positions`: the position and segment rows keep nothing in the "what" half for the whole run
  (their gradients there are zeroed), so a "what" head in the first layer cannot tell a word from its copy
  by where it stands. With `frozen-match`, the first layer's "what" heads match words by construction.
"""

from __future__ import annotations

import dataclasses
import sys

import quality
import torch

from nanobert import cli
from nanobert import model as model_file
from nanobert.data import nsp
from nanobert.objectives import mlm_nsp as objective_file
from nanobert.objectives import registry
from nanobert.tokenizer import CLS_ID, MASK_ID


def blank_specials() -> None:
    """After the roles start, the [CLS] and [MASK] rows' second half (what the "what" heads read) is zero."""
    roles_init = model_file.roles_init

    @torch.no_grad()
    def patched(embeddings, layers, config):
        roles_init(embeddings, layers, config)
        half = config.hidden_size // 2
        embeddings.word_embeddings.weight[[CLS_ID, MASK_ID], half:] = 0.0

    model_file.roles_init = patched


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


def roles_before() -> None:
    """The roles start as it was before `[CLS]` and `[MASK]` started blank (a control): the model's start with
    the specials' rows put back as drawn (blanking them draws nothing, so every other weight is the same)."""
    roles_init = model_file.roles_init

    @torch.no_grad()
    def before(embeddings, layers, config):
        drawn = embeddings.word_embeddings.weight[[CLS_ID, MASK_ID]].clone()
        roles_init(embeddings, layers, config)
        embeddings.word_embeddings.weight[[CLS_ID, MASK_ID]] = drawn

    model_file.roles_init = before


def blank_uncentred() -> None:
    """`blank-specials` in its first form: the roles start before, then the [CLS] and [MASK] rows blanked."""
    roles_before()
    blank_specials()


def frozen_match() -> None:
    """The "what" heads' query and key rows never train: a gradient hook zeroes them on every backward."""
    roles_init = model_file.roles_init

    def patched(embeddings, layers, config):
        roles_init(embeddings, layers, config)
        H = config.hidden_size
        rows = torch.zeros(3 * H, dtype=torch.bool)
        for block in (0, H):  # the query block, then the key block (they start equal)
            rows[block + H // 2 : block + H] = True  # heads nh/2 .. nh-1 are the "what" heads

        def keep(grad):
            grad = grad.clone()
            grad[rows.to(grad.device)] = 0.0
            return grad

        for layer in layers:
            layer.attention.qkv.weight.register_hook(keep)
            layer.attention.qkv.bias.register_hook(keep)

    model_file.roles_init = patched


def confined_positions() -> None:
    """The position and segment rows' second half stays zero: a gradient hook zeroes it on every backward."""
    roles_init = model_file.roles_init

    def patched(embeddings, layers, config):
        roles_init(embeddings, layers, config)
        half = config.hidden_size // 2

        def keep(grad):
            grad = grad.clone()
            grad[:, half:] = 0.0
            return grad

        embeddings.position_embeddings.weight.register_hook(keep)
        embeddings.token_type_embeddings.weight.register_hook(keep)

    model_file.roles_init = patched


SCREENS = {
    "blank-specials": blank_specials,
    "roles-before": roles_before,
    "blank-uncentred": blank_uncentred,
    "balanced-batches": balanced_batches,
    "nsp-x4": nsp_weight(4.0),
    "frozen-match": frozen_match,
    "confined-positions": confined_positions,
}


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
