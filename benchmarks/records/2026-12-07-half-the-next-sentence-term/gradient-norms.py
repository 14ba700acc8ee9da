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

torch.set_num_threads(1)
documents = read_text_file("data/wiki-squad/dev.raw")
for checkpoint in sys.argv[1:]:
    model, config = load_pretraining_checkpoint(checkpoint)
    tokenizer = checkpoint_tokenizer(checkpoint, model, config)
    batches = prepare_eval_batches(encode_documents(tokenizer, documents), 128, 32, model.config.vocab_size)
    model.train()  # the recipes train without dropout, so this is the function training differentiates
    rows = []
    for batch in batches[::12][:12]:
        batch = {k: v for k, v in batch.items() if k != "loss_share"}
        norms = {}
        for term, (w_mlm, w_nsp) in {"mlm": (1, 0), "nsp": (0, 1), "sum": (1, 1), "half": (1, 0.5)}.items():
            model.zero_grad()
            out = model(**batch, return_logits=False)
            (w_mlm * out.mlm_loss + w_nsp * out.nsp_loss).backward()
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            norms[term] = float(torch.sqrt(sum((g**2).sum() for g in grads)))
        rows.append(norms)
    mean = {k: round(sum(r[k] for r in rows) / len(rows), 3) for k in rows[0]}
    above = sum(r["sum"] > 1 for r in rows)
    print(checkpoint, mean, f"summed norm above the clip (1.0) on {above} of {len(rows)} batches")
