"""What users have stays put: the names `import nanobert` exports and every command and option of the CLI.

Both lists were taken from the code before the package moved into role folders. A name or an option leaves
only on purpose: change the list here in the same commit, and say why.
"""

import argparse

import nanobert
from nanobert.cli import build_parser

EXPORTS = [
    "BertForPreTraining",
    "BertForSequenceClassification",
    "BertLMHeadModel",
    "BertModel",
    "DataSources",
    "FinetuneConfig",
    "InferenceModel",
    "MaskingCollator",
    "ModelConfig",
    "NanobertError",
    "PRESETS",
    "TaskSpec",
    "TrainConfig",
    "attention_figure",
    "create_instances",
    "curves_figure",
    "encode_documents",
    "encode_pair",
    "evaluate_blimp",
    "evaluate_checkpoint",
    "export_hf",
    "finetune_classifier",
    "glue",
    "import_hf",
    "load",
    "load_blimp",
    "load_documents",
    "load_finetuned",
    "load_pretraining_checkpoint",
    "load_tokenizer",
    "plot_attention",
    "predict",
    "predict_texts",
    "preset_configs",
    "pretrain",
    "save_tokenizer",
    "score_sentences",
    "train_tokenizer",
]

# command -> its options and positional arguments, sorted (-h/--help left out)
COMMANDS = {
    "pretrain": (
        "--data --device --epochs --max-steps --objective --out --overwrite --prepared --preset --quiet "
        "--resume --seed --set --stop-after --time-budget --tokenizer --train --valid"
    ),
    "prepare": (
        "--data --min-frequency --out --overwrite --quiet --tokenizer --tokenizer-sample-words --valid "
        "--vocab-size"
    ),
    "evaluate": "--batch-size --data --device --valid checkpoint",
    "presets": "",
    "finetune": (
        "--adapt-batch-size --adapt-epochs --adapt-learning-rate --batch-size --dev --device --doc-stride "
        "--dropout --encoding --epochs --format --fresh-pooler --from-scratch --label-col "
        "--layer-lr-decay --learning-rate --max-answer-length --max-query-length --max-seq-len "
        "--max-train-examples --metric --no-fresh-pooler --no-symmetric-pairs --null-score-threshold "
        "--out --overwrite --pooling --precision --quiet --seed --symmetric-pairs --task --test --text-col "
        "--text-pair-col --train --warmup-ratio --weight-decay checkpoint"
    ),
    "glue": (
        "--batch-size --control --data --device --dropout --epochs --fresh-pooler --layer-lr-decay "
        "--learning-rate --max-seq-len --max-train-examples --no-fresh-pooler --out --overwrite --pooling "
        "--precision "
        "--quiet --seeds --tasks --warmup-ratio --weight-decay checkpoint"
    ),
    "predict": (
        "--batch-size --device --encoding --format --input --null-score-threshold --out --text-col "
        "--text-pair-col model"
    ),
    "answer": "--context --device --json --null-score-threshold --question checkpoint",
    "fill-mask": "--device --json --top-k checkpoint text",
    "nsp": "--device --json checkpoint text_a text_b",
    "generate": "--device --json --max-new-tokens --seed --temperature --top-k checkpoint prompt",
    "similarity": "--device --json checkpoint text_a text_b",
    "embed": "--batch-size --device --input --json --out checkpoint",
    "attention": "--device --head --json --layer --out --pair checkpoint text",
    "explain": "--device --json --preview --top-k checkpoint text_a text_b",
    "score": "--device --json --rule checkpoint text_a text_b",
    "blimp": (
        "--batch-tokens --data --device --json --limit --plot --precision --quiet --rule --vocab-from "
        "checkpoint"
    ),
    "export-hf": "--json --overwrite checkpoint out",
    "import-hf": "--json --overwrite --seed hf_dir out",
    "serve": "--allow-host --device --host --port path",
}


def test_import_nanobert_exports_the_same_names():
    assert nanobert.__all__ == EXPORTS
    for name in EXPORTS:
        assert getattr(nanobert, name) is not None


def test_every_command_keeps_its_options():
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    found = {}
    for name, command in commands.items():
        options = []
        for action in command._actions:
            if action.option_strings:
                options += [o for o in action.option_strings if o not in ("-h", "--help")]
            else:
                options.append(action.dest)
        found[name] = " ".join(sorted(options))
    assert found == COMMANDS
