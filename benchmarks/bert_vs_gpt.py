"""BERT vs GPT on the same stack: what does seeing both sides of a word buy?

Trains the two objectives with the same shape, the same tokenizer and the same CPU time on the WikiText-2
protocol (train on wiki.valid.tokens, with best/ chosen on its last 10% of documents; test on
wiki.test.tokens), then scores both on the same held-out positions: the positions the fixed evaluation
masking chooses (15%, 80/10/10, seed 0) in the standard held-out NSP pairs.

- BERT predicts each masked token from both sides (the 80/10/10-corrupted pair, as in the held-out metric).
- GPT predicts the same token from the left context only: the pair's words before it (the [SEP] between A
  and B removed, since GPT only ever saw [SEP] at a document's end), uncorrupted.

Accuracy is split by where the token sits in its sentence: the first word, the last word (before the
closing punctuation), or anywhere else. Each model's own held-out loss and perplexity are reported too
(BERT: masked tokens; GPT: every next word of the test file). With `--blimp DIR` both are also scored on
BLiMP's minimal pairs (`nanobert blimp`: BERT by pseudo-log-likelihood, GPT by log-likelihood), overall and
by field, beside the published figures of the BLiMP repository's results (models_summary.jsonl). The two
objectives train at once, one process and one thread each, so they share the machine evenly:

    python benchmarks/bert_vs_gpt.py --train ../shared/data/wikitext-2/wiki.valid.tokens \\
        --test ../shared/data/wikitext-2/wiki.test.tokens --time-budget 1800 --out runs/bert-vs-gpt \\
        --blimp ../shared/data/blimp
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

from nanobert.blimp import PUBLISHED, evaluate_blimp, load_blimp
from nanobert.checkpoint import load_causal_lm, load_pretraining_checkpoint, read_config
from nanobert.config import build_configs, parse_overrides
from nanobert.corpus import load_documents
from nanobert.errors import (
    ArgumentParser,
    NanobertError,
    check_input_file,
    check_output_file,
    positive_int,
    run_script,
)
from nanobert.evaluate import (
    eval_instances,
    evaluate_model,
    prepare_causal_eval_batches,
    prepare_eval_batches,
)
from nanobert.inference import load
from nanobert.model import IGNORE_INDEX
from nanobert.scoring import scoring_precision
from nanobert.tokenizer import CLS_ID, NUM_SPECIAL_TOKENS, SEP_ID, encode_documents, load_tokenizer

PLACES = ("first word", "middle", "last word")
SENTENCE_END = {".", "!", "?"}
FILL = ["the [MASK] of the united states is the head of state .", "the cat sat on the [MASK] ."]
PROMPTS = ["the president of the united states", "the cat sat on the"]


def train_both(args: argparse.Namespace, out: Path) -> None:
    """Both objectives at once, `nanobert pretrain` in two processes of one thread each; GPT reuses the
    tokenizer BERT trains (trained first, in a few seconds, so that both see the very same word pieces)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    base = [sys.executable, "-m", "nanobert", "pretrain", "--train", args.train, "--preset", args.preset]
    base += ["--time-budget", str(args.time_budget), "--seed", str(args.seed), "--quiet", "--overwrite"]
    tokenizer = out / "tokenizer"
    if not (tokenizer / "tokenizer.json").is_file():
        from nanobert.sources import DataSources
        from nanobert.tokenizer import save_tokenizer, train_tokenizer

        train_docs, _, _ = DataSources(data=None, train_file=args.train).documents()
        save_tokenizer(train_tokenizer((s for d in train_docs for s in d), 8192), tokenizer)
    procs = {
        objective: subprocess.Popen(
            [*base, "--objective", objective, "--out", str(out / objective), "--tokenizer", str(tokenizer)]
            + (["--set", *args.set] if args.set else []),
            env=env,
            stdout=open(out / f"{objective}.json", "w"),  # noqa: SIM115 - closed with the process
            stderr=open(out / f"{objective}.log", "w"),  # noqa: SIM115
        )
        for objective in ("mlm_nsp", "causal")
    }
    for objective, proc in procs.items():
        if proc.wait() != 0:
            raise SystemExit(f"{objective} training failed; see {out / objective}.log")


def sentence_places(documents: list[list[list[int]]], tokenizer) -> list[list[list[str]]]:
    """For every token of the held-out documents: first word, last word or middle of its sentence.

    A word is a piece without the '##' prefix and the pieces that continue it; the last word is the last
    one before the sentence's closing punctuation.
    """
    places = []
    for doc in documents:
        doc_places = []
        for sentence in doc:
            pieces = [tokenizer.id_to_token(t) for t in sentence]
            words = [i for i, p in enumerate(pieces) if not p.startswith("##")] or [0]
            content = [w for w in words if pieces[w] not in SENTENCE_END] or words
            word_of = [max([w for w in words if w <= i] or [0]) for i in range(len(pieces))]
            first, last = content[0], content[-1]
            doc_places.append(
                ["first word" if w == first else "last word" if w == last else "middle" for w in word_of]
            )
        places.append(doc_places)
    return places


def where_each_token_sits(tokenized, tokenizer, max_seq_len: int, eval_seed: int) -> list[list[str | None]]:
    """The place of every position of every held-out instance, in `eval_instances` order.

    Instance building depends only on sentence lengths and the seed, so building it again over token
    *indexes* (offset past the special ids) gives the same instances with each position's origin.
    """
    places = [p for doc in sentence_places(tokenized, tokenizer) for sentence in doc for p in sentence]
    index_docs, next_index = [], NUM_SPECIAL_TOKENS
    for doc in tokenized:
        index_docs.append([])
        for sentence in doc:
            index_docs[-1].append(list(range(next_index, next_index + len(sentence))))
            next_index += len(sentence)
    instances = eval_instances(index_docs, max_seq_len, eval_seed)
    real = eval_instances(tokenized, max_seq_len, eval_seed)
    assert [len(a.input_ids) for a in instances] == [len(b.input_ids) for b in real]
    first = NUM_SPECIAL_TOKENS
    return [[places[t - first] if t >= first else None for t in inst.input_ids] for inst in instances]


@torch.no_grad()
def same_positions(bert_dir: Path, gpt_dir: Path, test_file: str) -> dict:
    """Accuracy of both models at the positions the fixed evaluation masking chooses, split by place."""
    bert, config = load_pretraining_checkpoint(bert_dir)
    gpt, _ = load_causal_lm(gpt_dir)
    tokenizer = load_tokenizer(bert_dir)
    max_seq_len, eval_seed = config["train"]["max_seq_len"], config["train"]["eval_seed"]
    tokenized = encode_documents(tokenizer, load_documents(test_file, "test"))
    originals = eval_instances(tokenized, max_seq_len, eval_seed)
    batches = prepare_eval_batches(tokenized, max_seq_len, 64, bert.config.vocab_size, eval_seed)
    places = where_each_token_sits(tokenized, tokenizer, max_seq_len, eval_seed)
    hits: dict[str, dict[str, list[int]]] = {"bert": defaultdict(list), "gpt": defaultdict(list)}
    row = 0
    for batch in batches:
        out = bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        bert_guess = out.prediction_logits.argmax(-1)  # (B, T)
        for b in range(batch["input_ids"].size(0)):
            original = originals[row].input_ids
            targets = (batch["labels"][b] != IGNORE_INDEX).nonzero().flatten().tolist()
            # GPT reads [CLS] and the pair's tokens without the [SEP]s, with nothing corrupted
            keep = [p for p, t in enumerate(original) if t != SEP_ID and (p == 0 or t != CLS_ID)]
            gpt_ids = torch.tensor([[original[p] for p in keep]])
            gpt_guess = gpt(gpt_ids).logits[0].argmax(-1)  # position g guesses the token at g + 1
            at = {p: g for g, p in enumerate(keep)}
            for p in targets:
                place = places[row][p]
                hits["bert"][place].append(int(bert_guess[b, p] == original[p]))
                hits["gpt"][place].append(int(gpt_guess[at[p] - 1] == original[p]))
            row += 1
    table = {}
    for model, by_place in hits.items():
        every = [h for place in PLACES for h in by_place[place]]
        table[model] = {"all": sum(every) / len(every), "positions": len(every)}
        table[model] |= {place: sum(by_place[place]) / max(len(by_place[place]), 1) for place in PLACES}
        table[model]["counts"] = {place: len(by_place[place]) for place in PLACES}
    return table


def own_metrics(bert_dir: Path, gpt_dir: Path, test_file: str) -> dict:
    """Each model's own held-out figures on the test file: BERT's MLM + NSP, GPT's next word."""
    bert, config = load_pretraining_checkpoint(bert_dir)
    gpt, _ = load_causal_lm(gpt_dir)
    tokenizer = load_tokenizer(bert_dir)
    tokenized = encode_documents(tokenizer, load_documents(test_file, "test"))
    cfg = config["train"]
    masked = prepare_eval_batches(tokenized, cfg["max_seq_len"], 64, bert.config.vocab_size, cfg["eval_seed"])
    windows = prepare_causal_eval_batches(tokenized, cfg["max_seq_len"], 64)
    return {"bert": evaluate_model(bert, masked, "cpu"), "gpt": evaluate_model(gpt, windows, "cpu")}


def examples(bert_dir: Path, gpt_dir: Path) -> dict:
    bert, gpt = load(bert_dir), load(gpt_dir)
    fills = {text: [c.token for c in bert.fill_mask(text, top_k=5).masks[0].candidates] for text in FILL}
    generations = {p: gpt.generate(p, max_new_tokens=20, temperature=0).continuation for p in PROMPTS}
    sampled = {
        p: gpt.generate(p, max_new_tokens=20, temperature=0.8, top_k=40, seed=1).continuation for p in PROMPTS
    }
    return {"fill_mask": fills, "generate_greedy": generations, "generate_sampled": sampled}


def blimp(bert_dir: Path, gpt_dir: Path, data: str, limit: int | None) -> dict:
    """Both models' BLiMP accuracies (`nanobert blimp`), in the precision `auto` picks for each, timed."""
    pairs = load_blimp(data, limit)
    out = {}
    for key, directory in (("bert", bert_dir), ("gpt", gpt_dir)):
        model = load(directory)
        dtype, why = scoring_precision(model.model)
        report = evaluate_blimp(model.model, model.tokenizer, pairs, dtype=dtype)
        out[key] = {
            "overall": report.full.overall,
            "fields": report.full.fields,
            "phenomena": report.full.phenomena,
            "pairs": report.full.pairs,
            "rule": report.rule,
            "seconds": round(report.seconds, 1),
            "precision": why,
        }
    return out


def blimp_markdown(scores: dict) -> str:
    """BLiMP by field for both models, beside the published figures (full suite, mean over paradigms)."""
    fields = list(scores["bert"]["fields"])
    lines = [
        f"| model | BLiMP, all {scores['bert']['pairs']:,} pairs | {' | '.join(fields)} | time to score |",
        "|---|---|" + "---|" * len(fields) + "---|",
    ]
    for name, key in (("BERT (MLM + NSP), pseudo-log-likelihood", "bert"), ("GPT (causal)", "gpt")):
        s = scores[key]
        by_field = " | ".join(f"{100 * s['fields'][f]:.1f}" for f in fields)
        lines.append(f"| {name} | **{100 * s['overall']:.1f}** | {by_field} | {s['seconds']:.0f} s |")
    for name, value in PUBLISHED.items():
        lines.append(f"| {name} (BLiMP repository's results) | {value:.1f} |" + " |" * len(fields) + " |")
    lines.append("| chance | 50.0 |" + " |" * len(fields) + " |")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    """The table README.md shows ("BERT and GPT on the same stack"), same columns: accuracy at the same
    positions, all and by place (the better model's in bold), then each model's own held-out loss (on its own
    targets, so the two are not comparable) and perplexity."""
    s, own = result["same_positions"], result["own"]
    lines = [
        f"| model | sees | accuracy, all {s['bert']['positions']:,} positions | first word of a sentence "
        "| middle | last word | own held-out loss | own perplexity |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows = (
        ("BERT (MLM + NSP)", "both sides", "bert", "mlm", "masked tokens"),
        ("GPT (causal)", "left only", "gpt", "lm", "next word"),
    )
    for name, sees, key, prefix, targets in rows:
        accuracy = []
        for column in ("all", *PLACES):
            value, best = s[key][column], max(s[m][column] for m in ("bert", "gpt"))
            accuracy.append(f"**{value:.3f}**" if value == best else f"{value:.3f}")
        lines.append(
            f"| {name} | {sees} | {' | '.join(accuracy)} | {own[key][prefix + '_loss']:.2f} ({targets}) | "
            f"{own[key][prefix + '_perplexity']:.0f} |"
        )
    counts = s["bert"]["counts"]
    lines.append(
        f"\n{s['bert']['positions']:,} positions: {counts['first word']:,} first words, "
        f"{counts['middle']:,} middle, {counts['last word']:,} last words."
    )
    return "\n".join(lines)


def check_documents(path: str, option: str) -> None:
    """A one-line error unless `path` is a UTF-8 text file of at least two documents, as NSP needs."""
    if len(load_documents(path)) < 2:  # load_documents: binary, non-UTF-8 and empty files
        raise NanobertError(f"{option} {path} holds one document; NSP pairs need at least two")


def main() -> None:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", required=True, help="e.g. ../shared/data/wikitext-2/wiki.valid.tokens")
    p.add_argument("--test", required=True, help="e.g. ../shared/data/wikitext-2/wiki.test.tokens")
    p.add_argument("--preset", default="wikitext2-cpu", help="the shape and recipe both train with")
    p.add_argument("--time-budget", type=float, default=1800.0, help="seconds of training for each objective")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="overrides for both runs")
    p.add_argument("--out", required=True, help="where the two runs and results.json go")
    p.add_argument("--skip-training", action="store_true", help="score the runs already in --out")
    p.add_argument("--report", action="store_true", help="print the table of --out/results.json and stop")
    p.add_argument(
        "--blimp", metavar="DIR", help="also score both on BLiMP (its data/ folder of .jsonl files)"
    )
    p.add_argument(
        "--blimp-limit", type=positive_int, metavar="N", help="the first N pairs of each paradigm only"
    )
    args = p.parse_args()
    out = Path(args.out)
    if args.report:
        result = json.loads(check_input_file(out / "results.json", "--report: --out's").read_text())
        print(markdown(result))
        if "blimp" in result:
            print("\n" + blimp_markdown(result["blimp"]))
        return
    if not args.skip_training and not 0 < args.time_budget < math.inf:  # NaN fails this too
        raise NanobertError(f"--time-budget must be a positive number of seconds, got {args.time_budget:g}")
    # What is read after the (long) training is checked before it: the test file as text with the two
    # documents the held-out NSP pairs need (a binary, non-UTF-8 or empty file fails now, not after training).
    check_input_file(args.test, "--test")
    check_documents(args.test, "--test")
    check_output_file(out / "results.json")  # --out is not, and does not lie under, a file
    if args.blimp:
        load_blimp(args.blimp, args.blimp_limit)  # every line read as BLiMP now, not after the training
    elif args.blimp_limit:
        raise NanobertError("--blimp-limit needs --blimp DIR")
    if args.skip_training:
        for objective in ("mlm_nsp", "causal"):
            check_input_file(out / objective / "summary.json", "--skip-training needs a finished run:")
    else:
        check_input_file(args.train, "--train")
        check_documents(args.train, "--train")  # the tokenizer and both runs train on it
        model_over, train_over = parse_overrides(args.set)
        # An unknown preset or --set key, a bad --seed; no file where a run's directory goes.
        for objective in ("mlm_nsp", "causal"):
            check_output_file(out / objective / "summary.json")
            build_configs(
                args.preset,
                model_over,
                {**train_over, "objective": objective, "time_budget": args.time_budget, "seed": args.seed},
            )
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    if not args.skip_training:
        train_both(args, out)
    bert_dir, gpt_dir = out / "mlm_nsp" / "best", out / "causal" / "best"
    summaries = {k: json.loads((out / k / "summary.json").read_text()) for k in ("mlm_nsp", "causal")}
    result = {
        "same_positions": same_positions(bert_dir, gpt_dir, args.test),
        "own": own_metrics(bert_dir, gpt_dir, args.test),
        "examples": examples(bert_dir, gpt_dir),
        **({"blimp": blimp(bert_dir, gpt_dir, args.blimp, args.blimp_limit)} if args.blimp else {}),
        "training": {
            k: {f: s[f] for f in ("steps", "train_time_s", "tokens_per_s", "hardware")}
            | {"best_step": read_config(out / k / "best")["step"]}
            for k, s in summaries.items()
        },
        "seconds": round(time.perf_counter() - start),
    }
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result))
    if args.blimp:
        print("\n" + blimp_markdown(result["blimp"]))
    print(json.dumps({"examples": result["examples"], "training": result["training"]}, indent=2))


if __name__ == "__main__":
    raise SystemExit(run_script("bert_vs_gpt.py", main))
