"""The gradient norms of the MLM term, the NSP term, their sum and MLM + 0.5 x NSP, over the whole model, on
held-out batches (wiki-squad/dev.raw, masking 15%, seed 0: every 12th of the fixed evaluation batches, 11 of
them) of each checkpoint given. Run from the folder holding the run folders:

    python gradient-norms.py m1000-rec-s1/last f3000-rec-s1/last f3000-w05-s1/last l4s3/last nspw05s3/last
"""

import sys

import torch

from nanobert.checkpoints.checkpoint import checkpoint_tokenizer, load_pretraining_checkpoint
from nanobert.data.corpus import read_text_file
from nanobert.objectives.mlm_nsp import prepare_eval_batches
from nanobert.tokenizer import encode_documents

TERMS = {"mlm": (1, 0), "nsp": (0, 1), "sum": (1, 1), "half": (1, 0.5)}  # weights of (MLM, NSP)


def flat_grad(loss: torch.Tensor, params: list[torch.Tensor], retain_graph: bool = False) -> torch.Tensor:
    """The gradient of `loss` over every parameter as one vector (zeros where a parameter has none)."""
    grads = torch.autograd.grad(loss, params, retain_graph=retain_graph, allow_unused=True)
    pairs = zip(grads, params, strict=True)
    return torch.cat([(g if g is not None else torch.zeros_like(p)).flatten() for g, p in pairs])


torch.set_num_threads(1)
documents = read_text_file("data/wiki-squad/dev.raw")
for checkpoint in sys.argv[1:]:
    model, config = load_pretraining_checkpoint(checkpoint)
    tokenizer = checkpoint_tokenizer(checkpoint, model, config)
    batches = prepare_eval_batches(encode_documents(tokenizer, documents), 128, 32, model.config.vocab_size)
    model.train()  # the recipes train without dropout, so this is the function training differentiates
    rows = []
    params = list(model.parameters())
    for batch in batches[::12]:
        out = model(**{k: v for k, v in batch.items() if k != "loss_share"}, return_logits=False)
        # one forward and one gradient per term; the sum's and the half's follow from those two (linearity)
        mlm = flat_grad(out.mlm_loss, params, retain_graph=True)
        nsp = flat_grad(out.nsp_loss, params)
        rows.append({term: float((a * mlm + b * nsp).norm()) for term, (a, b) in TERMS.items()})
    mean = {k: round(sum(r[k] for r in rows) / len(rows), 3) for k in rows[0]}
    above = sum(r["sum"] > 1 for r in rows)
    print(checkpoint, mean, f"summed norm above the clip (1.0) on {above} of {len(rows)} batches")
