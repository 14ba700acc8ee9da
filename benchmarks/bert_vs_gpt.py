"""BERT vs GPT vs both on the same stack: what does seeing both sides of a word buy, and can one model
have both?

Trains the three objectives (BERT's mlm_nsp, GPT's causal, and the hybrid GPT-BERT) with the same shape, the
same tokenizer and the same CPU time on the WikiText-2 protocol (train on wiki.valid.tokens, with best/
chosen on its last 10% of documents; test on wiki.test.tokens), then scores all on the same held-out
positions: the positions the fixed evaluation masking chooses (15%, 80/10/10, seed 0) in the standard
held-out NSP pairs.

- BERT predicts each masked token from both sides (the 80/10/10-corrupted pair, as in the held-out metric).
- GPT predicts the same token from the left context only: the pair's words before it (the [SEP] between A
  and B removed, since GPT only ever saw [SEP] at a document's end), uncorrupted.
- The hybrid reads BERT's corrupted pair both ways, without the pair's [SEP]s (it, too, saw [SEP] only at a
  document's end), and predicts each masked token from the output before it (its shifted head).

Accuracy is split by where the token sits in its sentence: the first word, the last word (before the
closing punctuation), or anywhere else. Each model's own held-out perplexity is reported too (BERT: masked
tokens; GPT: every next word of the test file; the hybrid: both, the next words being GPT's very targets).
With `--sst2 DIR` each is fine-tuned on SST-2 (`nanobert finetune`, the CLI's defaults, one seed) and
scored on its dev set. With `--blimp DIR` both are also scored on
BLiMP's minimal pairs (`nanobert blimp`: BERT by pseudo-log-likelihood, GPT by log-likelihood), overall and
by field, beside the published figures of the BLiMP repository's results (models_summary.jsonl). The two
objectives train at once, one process and one thread each, so they share the machine evenly:

    python benchmarks/bert_vs_gpt.py --train ../shared/data/wikitext-2/wiki.valid.tokens \\
        --test ../shared/data/wikitext-2/wiki.test.tokens --time-budget 1800 --out runs/bert-vs-gpt \\
        --blimp ../shared/data/blimp --sst2 ../shared/data/glue/sst2
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

from nanobert.checkpoints.checkpoint import load_language_model, read_config
from nanobert.cli.overrides import parse_overrides
from nanobert.data.corpus import load_documents
from nanobert.errors import ArgumentParser, NanobertError, positive_int, run_script
from nanobert.files import check_input_file, check_output_file
from nanobert.objectives.evaluate import (
    eval_instances,
    evaluate_model,
    prepare_causal_eval_batches,
    prepare_eval_batches,
)
from nanobert.objectives.hybrid import hybrid_held_out
from nanobert.pretraining.recipes import build_configs
from nanobert.tokenizer import (
    CLS_ID,
    IGNORE_INDEX,
    NUM_SPECIAL_TOKENS,
    SEP_ID,
    encode_documents,
    load_tokenizer,
)
from nanobert.use.blimp import PUBLISHED, evaluate_blimp, load_blimp
from nanobert.use.inference import load
from nanobert.use.scoring import scoring_precision

PLACES = ("first word", "middle", "last word")
SENTENCE_END = {".", "!", "?"}
FILL = ["the [MASK] of the united states is the head of state .", "the cat sat on the [MASK] ."]
PROMPTS = ["the president of the united states", "the cat sat on the"]
# The three models: their key in results.json, objective, name in the tables and what each position sees.
MODELS = {
    "bert": ("mlm_nsp", "BERT (MLM + NSP)", "both sides"),
    "gpt": ("causal", "GPT (causal)", "left only"),
    "hybrid": ("hybrid", "hybrid (GPT-BERT)", "both sides, or left only"),
}
OBJECTIVES = [objective for objective, _, _ in MODELS.values()]


def run_at_once(commands: dict[str, list[str]], out: Path) -> None:
    """The commands at once, one thread each; NAME.json (stdout) and NAME.log (stderr) of each in `out`."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs = {
        name: subprocess.Popen(
            command,
            env=env,
            stdout=open(out / f"{name}.json", "w"),  # noqa: SIM115 - closed with the process
            stderr=open(out / f"{name}.log", "w"),  # noqa: SIM115
        )
        for name, command in commands.items()
    }
    for name, proc in procs.items():
        if proc.wait() != 0:
            raise SystemExit(f"{name} failed; see {out / name}.log")


def train_all(args: argparse.Namespace, out: Path) -> None:
    """The three objectives at once, `nanobert pretrain` in three processes of one thread each, sharing the
    machine evenly; all read the one tokenizer trained first (a few seconds), so all see the same pieces."""
    base = [sys.executable, "-m", "nanobert", "pretrain", "--train", args.train, "--preset", args.preset]
    base += ["--time-budget", str(args.time_budget), "--seed", str(args.seed), "--quiet", "--overwrite"]
    tokenizer = out / "tokenizer"
    if not (tokenizer / "tokenizer.json").is_file():
        from nanobert.data.sources import DataSources
        from nanobert.tokenizer import save_tokenizer, train_tokenizer

        train_docs, _, _ = DataSources(data=None, train_file=args.train).documents()
        save_tokenizer(train_tokenizer((s for d in train_docs for s in d), 8192), tokenizer)
    run_at_once(
        {
            objective: [*base, "--objective", objective, "--out", str(out / objective)]
            + ["--tokenizer", str(tokenizer)]
            + (["--set", *args.set] if args.set else [])
            for objective in OBJECTIVES
        },
        out,
    )


def finetune_all(out: Path, sst2: str, seed: int) -> dict:
    """Each model's best/ fine-tuned on SST-2 with the CLI's defaults, at once; dev accuracy of the best
    epoch."""
    files = ["--train", f"{sst2}/train.tsv", "--dev", f"{sst2}/dev.tsv", "--text-col", "sentence"]
    files += ["--label-col", "label", "--seed", str(seed), "--quiet", "--overwrite"]
    run_at_once(
        {
            f"sst2-{key}": [sys.executable, "-m", "nanobert", "finetune", str(out / objective / "best")]
            + [*files, "--out", str(out / f"sst2-{key}")]
            for key, (objective, _, _) in MODELS.items()
        },
        out,
    )
    return {
        key: json.loads((out / f"sst2-{key}" / "summary.json").read_text())["dev"]["accuracy"]
        for key in MODELS
    }


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
def same_positions(dirs: dict[str, Path], test_file: str) -> dict:
    """Accuracy of the three models at the positions the fixed evaluation masking chooses, split by place."""
    bert, config = load_language_model(dirs["bert"])
    gpt, _ = load_language_model(dirs["gpt"])
    hybrid, _ = load_language_model(dirs["hybrid"])
    tokenizer = load_tokenizer(dirs["bert"])
    max_seq_len, eval_seed = config["train"]["max_seq_len"], config["train"]["eval_seed"]
    tokenized = encode_documents(tokenizer, load_documents(test_file, "test"))
    originals = eval_instances(tokenized, max_seq_len, eval_seed)
    batches = prepare_eval_batches(tokenized, max_seq_len, 64, bert.config.vocab_size, eval_seed)
    places = where_each_token_sits(tokenized, tokenizer, max_seq_len, eval_seed)
    hits: dict[str, dict[str, list[int]]] = {key: defaultdict(list) for key in MODELS}
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
            # the hybrid reads the same positions as BERT, corrupted as BERT's are, both ways
            hybrid_ids = batch["input_ids"][b, keep][None]
            hybrid_guess = hybrid(hybrid_ids, causal=False).logits[0].argmax(-1)  # g guesses g + 1
            at = {p: g for g, p in enumerate(keep)}
            for p in targets:
                place = places[row][p]
                hits["bert"][place].append(int(bert_guess[b, p] == original[p]))
                hits["gpt"][place].append(int(gpt_guess[at[p] - 1] == original[p]))
                hits["hybrid"][place].append(int(hybrid_guess[at[p] - 1] == original[p]))
            row += 1
    table = {}
    for model, by_place in hits.items():
        every = [h for place in PLACES for h in by_place[place]]
        table[model] = {"all": sum(every) / len(every), "positions": len(every)}
        table[model] |= {place: sum(by_place[place]) / max(len(by_place[place]), 1) for place in PLACES}
        table[model]["counts"] = {place: len(by_place[place]) for place in PLACES}
    return table


def own_metrics(dirs: dict[str, Path], test_file: str) -> dict:
    """Each model's own held-out figures on the test file: BERT's MLM + NSP, GPT's next word, the hybrid's
    both (its next-word targets are GPT's: the same windows)."""
    bert, config = load_language_model(dirs["bert"])
    tokenizer = load_tokenizer(dirs["bert"])
    tokenized = encode_documents(tokenizer, load_documents(test_file, "test"))
    cfg, vocab = config["train"], bert.config.vocab_size
    batches = {
        "bert": prepare_eval_batches(tokenized, cfg["max_seq_len"], 64, vocab, cfg["eval_seed"]),
        "gpt": prepare_causal_eval_batches(tokenized, cfg["max_seq_len"], 64),
        "hybrid": hybrid_held_out(tokenized, cfg["max_seq_len"], 64, vocab, cfg["eval_seed"]),
    }
    return {key: evaluate_model(load_language_model(dirs[key])[0], batches[key], "cpu") for key in MODELS}


def examples(dirs: dict[str, Path]) -> dict:
    bert, gpt, hybrid = (load(dirs[key]) for key in MODELS)

    def fills(model) -> dict:
        return {text: [c.token for c in model.fill_mask(text, top_k=5).masks[0].candidates] for text in FILL}

    def generations(model, **sampling) -> dict:
        return {p: model.generate(p, max_new_tokens=20, **sampling).continuation for p in PROMPTS}

    sampling = {"temperature": 0.8, "top_k": 40, "seed": 1}
    return {
        "fill_mask": fills(bert),
        "generate_greedy": generations(gpt, temperature=0),
        "generate_sampled": generations(gpt, **sampling),
        "hybrid": {
            "fill_mask": fills(hybrid),
            "generate_greedy": generations(hybrid, temperature=0),
            "generate_sampled": generations(hybrid, **sampling),
        },
    }


def blimp(dirs: dict[str, Path], data: str, limit: int | None) -> dict:
    """The models' BLiMP accuracies (`nanobert blimp`), in the precision `auto` picks for each, timed."""
    pairs = load_blimp(data, limit)
    out = {}
    for key, directory in dirs.items():
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
    for key, (_, name, _) in MODELS.items():
        if key not in scores:  # results from before the hybrid
            continue
        s = scores[key]
        name += ", pseudo-log-likelihood" if s["rule"] != "causal" else ", log-likelihood"
        by_field = " | ".join(f"{100 * s['fields'][f]:.1f}" for f in fields)
        lines.append(f"| {name} | **{100 * s['overall']:.1f}** | {by_field} | {s['seconds']:.0f} s |")
    for name, value in PUBLISHED.items():
        lines.append(f"| {name} (BLiMP repository's results) | {value:.1f} |" + " |" * len(fields) + " |")
    lines.append("| chance | 50.0 |" + " |" * len(fields) + " |")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    """The table this script prints (its records keep it: benchmarks/records): accuracy at the same positions,
    all and by place (the best model's in bold), then each model's own held-out perplexities (masked tokens on
    its own inputs; next words on the same windows for GPT and the hybrid) and, where run, SST-2 dev
    accuracy."""
    s, own, sst2 = result["same_positions"], result["own"], result.get("sst2", {})
    keys = [key for key in MODELS if key in s]  # results from before the hybrid have two
    lines = [
        f"| model | sees | accuracy, all {s['bert']['positions']:,} positions | first word of a sentence "
        "| middle | last word | masked-token perplexity (own) | next-word perplexity | SST-2 dev |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key in keys:
        _, name, sees = MODELS[key]
        accuracy = []
        for column in ("all", *PLACES):
            value, best = s[key][column], max(s[m][column] for m in keys)
            accuracy.append(f"**{value:.3f}**" if value == best else f"{value:.3f}")
        perplexities = [
            f"{own[key][p]:.0f}" if p in own[key] else "-" for p in ("mlm_perplexity", "lm_perplexity")
        ]
        downstream = f"{sst2[key]:.3f}" if key in sst2 else "-"
        lines.append(
            f"| {name} | {sees} | {' | '.join(accuracy)} | {' | '.join(perplexities)} | {downstream} |"
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


def parse_args() -> argparse.Namespace:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", required=True, help="e.g. ../shared/data/wikitext-2/wiki.valid.tokens")
    p.add_argument("--test", required=True, help="e.g. ../shared/data/wikitext-2/wiki.test.tokens")
    p.add_argument("--preset", default="wikitext2-cpu", help="the shape and recipe both train with")
    p.add_argument("--time-budget", type=float, default=1800.0, help="seconds of training for each objective")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="overrides for both runs")
    p.add_argument("--out", required=True, help="where the three runs and results.json go")
    p.add_argument("--skip-training", action="store_true", help="score the runs already in --out")
    p.add_argument("--report", action="store_true", help="print the table of --out/results.json and stop")
    p.add_argument(
        "--blimp", metavar="DIR", help="also score all three on BLiMP (its data/ folder of .jsonl files)"
    )
    p.add_argument(
        "--sst2", metavar="DIR", help="also fine-tune each on SST-2 (train.tsv, dev.tsv) and score dev"
    )
    p.add_argument(
        "--blimp-limit", type=positive_int, metavar="N", help="the first N pairs of each paradigm only"
    )
    return p.parse_args()


def check_args(args: argparse.Namespace, out: Path) -> None:
    """What is read after the (long) training, checked before it, each mistake as one line."""
    if not args.skip_training and not 0 < args.time_budget < math.inf:  # NaN fails this too
        raise NanobertError(f"--time-budget must be a positive number of seconds, got {args.time_budget:g}")
    # The test file as text with the two documents the held-out NSP pairs need (a binary, non-UTF-8 or empty
    # file fails now, not after training).
    check_input_file(args.test, "--test")
    check_documents(args.test, "--test")
    check_output_file(out / "results.json")  # --out is not, and does not lie under, a file
    if args.blimp:
        load_blimp(args.blimp, args.blimp_limit)  # every line read as BLiMP now, not after the training
    elif args.blimp_limit:
        raise NanobertError("--blimp-limit needs --blimp DIR")
    if args.sst2:
        for split in ("train", "dev"):
            check_input_file(f"{args.sst2}/{split}.tsv", "--sst2")
    if args.skip_training:
        for objective in OBJECTIVES:
            check_input_file(out / objective / "summary.json", "--skip-training needs a finished run:")
    else:
        check_input_file(args.train, "--train")
        check_documents(args.train, "--train")  # the tokenizer and both runs train on it
        model_over, train_over = parse_overrides(args.set)
        # An unknown preset or --set key, a bad --seed; no file where a run's directory goes.
        for objective in OBJECTIVES:
            check_output_file(out / objective / "summary.json")
            build_configs(
                args.preset,
                model_over,
                {**train_over, "objective": objective, "time_budget": args.time_budget, "seed": args.seed},
            )


def score_all(args: argparse.Namespace, out: Path, start: float) -> dict:
    """What results.json holds: every comparison of the three best/ checkpoints, and their training runs."""
    dirs = {key: out / objective / "best" for key, (objective, _, _) in MODELS.items()}
    summaries = {k: json.loads((out / k / "summary.json").read_text()) for k in OBJECTIVES}
    return {
        "same_positions": same_positions(dirs, args.test),
        "own": own_metrics(dirs, args.test),
        "examples": examples(dirs),
        **({"blimp": blimp(dirs, args.blimp, args.blimp_limit)} if args.blimp else {}),
        **({"sst2": finetune_all(out, args.sst2, args.seed)} if args.sst2 else {}),
        "training": {
            k: {f: s[f] for f in ("steps", "train_time_s", "tokens_per_s", "hardware")}
            | {"best_step": read_config(out / k / "best")["step"]}
            for k, s in summaries.items()
        },
        "seconds": round(time.perf_counter() - start),
    }


def print_tables(result: dict) -> None:
    """The comparison's table, and BLiMP's when the results have it."""
    print(markdown(result))
    if "blimp" in result:
        print("\n" + blimp_markdown(result["blimp"]))


def main() -> None:
    args = parse_args()
    out = Path(args.out)
    if args.report:
        print_tables(json.loads(check_input_file(out / "results.json", "--report: --out's").read_text()))
        return
    check_args(args, out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    if not args.skip_training:
        train_all(args, out)
    result = score_all(args, out, start)
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    print_tables(result)  # the results have BLiMP's figures exactly when --blimp was given
    print(json.dumps({"examples": result["examples"], "training": result["training"]}, indent=2))


if __name__ == "__main__":
    raise SystemExit(run_script("bert_vs_gpt.py", main))
