"""The commands that use a trained model: `fill-mask`, `nsp`, `generate`, `similarity`, `embed`,
`attention`, `explain`, `score` and `blimp`."""

from __future__ import annotations

import sys

from nanobert.cli.common import (
    checkpoint_command,
    emit,
    load_for_inference,
    say_cut,
)
from nanobert.errors import positive_int


def _add_fill_mask(sub) -> None:
    p = checkpoint_command(
        sub, "fill-mask", _cmd_fill_mask, "the most probable word pieces at each [MASK] in a text"
    )
    p.add_argument("text", help='a text with one or more [MASK], e.g. "the cat sat on the [MASK] ."')
    p.add_argument("--top-k", type=int, default=5, help="candidates per [MASK] (default 5)")


def _cmd_fill_mask(args) -> int:
    from dataclasses import asdict

    result = load_for_inference(args).fill_mask(args.text, top_k=args.top_k)
    return emit(args, asdict(result), str(result))


def _add_nsp(sub) -> None:
    p = checkpoint_command(sub, "nsp", _cmd_nsp, "the probability that sentence B follows sentence A")
    p.add_argument("text_a", metavar="A")
    p.add_argument("text_b", metavar="B")


def _cmd_nsp(args) -> int:
    r = load_for_inference(args).next_sentence(args.text_a, args.text_b)
    return emit(args, {"IsNext": r.is_next, "NotNext": r.not_next}, str(r))


def _add_generate(sub) -> None:
    p = checkpoint_command(
        sub, "generate", _cmd_generate, "continue a text with a causal checkpoint (--objective causal)"
    )
    p.add_argument("prompt", help='the start of the text, e.g. "the cat sat on"')
    p.add_argument("--max-new-tokens", type=int, default=30, help="word pieces to add at most (default 30)")
    p.add_argument("--temperature", type=float, default=1.0, help="0 = always the most probable (default 1)")
    p.add_argument("--top-k", type=int, help="sample among the k most probable pieces only")
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the sampling (default 0): same seed, same text"
    )


def _cmd_generate(args) -> int:
    from dataclasses import asdict

    options = {k: getattr(args, k) for k in ("max_new_tokens", "temperature", "top_k", "seed")}
    result = load_for_inference(args).generate(args.prompt, **options)
    return emit(args, asdict(result), result.text)


def _add_similarity(sub) -> None:
    p = checkpoint_command(
        sub, "similarity", _cmd_similarity, "cosine similarity of two texts' mean-pooled embeddings"
    )
    p.add_argument("text_a", metavar="A")
    p.add_argument("text_b", metavar="B")


def _cmd_similarity(args) -> int:
    value = load_for_inference(args).similarity(args.text_a, args.text_b)
    return emit(args, {"cosine_similarity": value}, f"cosine similarity {value:.4f}")


def _add_embed(sub) -> None:
    p = checkpoint_command(
        sub, "embed", _cmd_embed, "one mean-pooled embedding per line of a text file, saved as .npy"
    )
    p.add_argument("--input", required=True, metavar="FILE", help="UTF-8 text, one text per line")
    p.add_argument("--out", required=True, metavar="FILE.npy", help="where to np.save the (lines, H) matrix")
    p.add_argument("--batch-size", type=positive_int, default=64)


def _cmd_embed(args) -> int:
    from nanobert.use.inference import embed_file

    path, shape, cut = embed_file(load_for_inference(args), args.input, args.out, batch_size=args.batch_size)
    say_cut(cut, "lines")
    text = f"wrote {path}: {shape[0]} embeddings of size {shape[1]} (float32)"
    return emit(args, {"out": str(path), "shape": list(shape), "dtype": "float32"}, text)


def _add_attention(sub) -> None:
    json_help = "print what was drawn as JSON, with the attention probabilities"
    help = "draw attention maps (tokens on both axes) as a PNG"
    p = checkpoint_command(sub, "attention", _cmd_attention, help, json_help)
    p.add_argument("text")
    p.add_argument("--pair", metavar="B", help="a second sentence, encoded as [CLS] A [SEP] B [SEP]")
    p.add_argument("--layer", type=int, help="one layer, counted from 0 (default: every layer)")
    p.add_argument("--head", type=int, help="one head, counted from 0 (default: every head)")
    p.add_argument("--out", required=True, metavar="PNG")


def _cmd_attention(args) -> int:
    from nanobert.use.plots import plot_attention

    maps = load_for_inference(args).attention(args.text, args.pair)
    path = plot_attention(maps, args.out, layer=args.layer, head=args.head)
    L, nh, T, _ = maps.probs.shape
    layers = [args.layer] if args.layer is not None else list(range(L))
    heads = [args.head] if args.head is not None else list(range(nh))
    probs = [[maps.probs[li, hi].round(4).tolist() for hi in heads] for li in layers]
    data = {"out": str(path), "tokens": maps.tokens, "layers": layers, "heads": heads, "attentions": probs}
    return emit(args, data, f"wrote {path}: {len(layers)} layer(s) x {len(heads)} head(s) over {T} tokens")


def _add_explain(sub) -> None:
    p = checkpoint_command(
        sub, "explain", _cmd_explain, "a step-by-step trace of one forward pass, for learners"
    )
    p.add_argument("text_a", metavar="A")
    p.add_argument("text_b", metavar="B", nargs="?", help="optional second sentence")
    p.add_argument("--top-k", type=int, default=5, help="predictions shown at each [MASK]")
    p.add_argument("--preview", type=int, default=6, help="numbers shown of each vector (default 6)")


def _cmd_explain(args) -> int:
    from dataclasses import asdict

    from nanobert.use.explain import format_trace

    model = load_for_inference(args)
    trace = model.explain(args.text_a, args.text_b, top_k=args.top_k, preview=args.preview)
    return emit(args, asdict(trace), format_trace(trace))


_RULE_HELP = (
    "a masked model's rule: within_word (default: the later pieces of a word masked too, Kauf & Ivanova "
    "2023) or original (one piece at a time, Salazar et al. 2020); a causal model has one rule"
)


def _add_score(sub) -> None:
    help = "how likely a sentence is, piece by piece; for two, which one the model prefers"
    p = checkpoint_command(sub, "score", _cmd_score, help)
    p.add_argument("text_a", metavar="SENTENCE")
    p.add_argument("text_b", metavar="OTHER", nargs="?", help="a second sentence to compare with the first")
    p.add_argument("--rule", choices=["within_word", "original"], help=_RULE_HELP)


def _cmd_score(args) -> int:
    """Score a sentence: its log-likelihood under the model (a masked model: pseudo-log-likelihood, each piece
    masked in turn), each word piece's share, and for two sentences which one the model prefers."""
    from nanobert.use.scoring import format_scores, score_report

    model = load_for_inference(args)
    texts = [args.text_a] if args.text_b is None else [args.text_a, args.text_b]
    scores = [model.score(t, args.rule) for t in texts]
    return emit(args, score_report(scores), format_scores(scores))


def _add_blimp(sub) -> None:
    help = "BLiMP: accuracy on 67,000 grammatical/ungrammatical sentence pairs, by field and phenomenon"
    p = checkpoint_command(sub, "blimp", _cmd_blimp, help)
    p.add_argument(
        "--data",
        default="nyu-mll/blimp",
        metavar="DIR|FILE",
        help="BLiMP's data/ folder of .jsonl files, one such file, or nyu-mll/blimp (the hub; the default)",
    )
    p.add_argument("--limit", type=positive_int, metavar="N", help="the first N pairs of each paradigm")
    p.add_argument(
        "--vocab-from",
        metavar="CORPUS",
        help="also report the pairs whose words all occur at least twice in CORPUS (BabyLM's filter)",
    )
    p.add_argument("--rule", choices=["within_word", "original"], help=_RULE_HELP)
    p.add_argument("--plot", metavar="PNG", help="draw the accuracies by phenomenon to this picture")
    p.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16"],
        default="fp32",
        help="fp32 (default: the same figure on every machine), bf16 (a bf16 copy of the model: faster on "
        "CPUs with native bf16, each score off by up to ~0.2 nats), or auto (the faster here, timed)",
    )
    p.add_argument("--batch-tokens", type=positive_int, default=8192, help="tokens per batch (default 8192)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _cmd_blimp(args) -> int:
    """Score BLiMP's minimal pairs (Warstadt et al. 2020): a pair passes when the model gives its grammatical
    sentence the higher score. Prints the accuracy overall, by field and by phenomenon, beside the published
    figures (5-gram 61.2, LSTM 69.8, Transformer-XL 69.6, GPT-2 83.0; chance 50)."""
    from dataclasses import asdict

    from nanobert.use.blimp import corpus_word_counts, evaluate_blimp, format_report, load_blimp, plot_report
    from nanobert.use.plots import image_path
    from nanobert.use.scoring import scoring_precision

    plot = image_path(args.plot) if args.plot else None  # a bad picture path fails before the work
    pairs = load_blimp(args.data, args.limit)
    counts = corpus_word_counts(args.vocab_from) if args.vocab_from else None
    model = load_for_inference(args)
    dtype, why = scoring_precision(model.model, args.precision)
    if not args.quiet:
        print(f"nanobert: precision {why}", file=sys.stderr)
    report = evaluate_blimp(
        model.model, model.tokenizer, pairs, args.rule, counts, args.batch_tokens, not args.quiet, dtype
    )
    text = format_report(report)
    if plot:
        text += f"\nwrote {plot_report(report, plot)}"
    data = asdict(report) | {"precision": "bf16" if dtype else "fp32", "plot": str(plot) if plot else None}
    return emit(args, data, text)


def add_commands(sub) -> None:
    _add_fill_mask(sub)
    _add_nsp(sub)
    _add_generate(sub)
    _add_similarity(sub)
    _add_embed(sub)
    _add_attention(sub)
    _add_explain(sub)
    _add_score(sub)
    _add_blimp(sub)
