"""nanobert: pretrain a BERT from scratch (MLM + NSP), then use, inspect, fine-tune and export it.

The Python API, in the order of notebooks/bert_from_scratch.ipynb (which walks all of it):

- data and tokens: `load_documents` ("toy", a WikiText name, a directory or a text file), `train_tokenizer`,
  `save_tokenizer`, `encode_pair`, `encode_documents`, `create_instances` (NSP pairs), `MaskingCollator`
  (80/10/10 masking);
- models: `ModelConfig`, `BertModel`, `BertForPreTraining`, `BertLMHeadModel` (causal),
  `BertForSequenceClassification`;
- training: `preset_configs(preset, **fields)` -> (ModelConfig, TrainConfig), `DataSources`, `pretrain`,
  `evaluate_checkpoint`, `curves_figure` (a run's losses and accuracies);
- using a checkpoint: `load` -> `InferenceModel` (`fill_mask`, `next_sentence`, `similarity`, `embed`,
  `attention`, `explain`, `generate`, `score`, `compare`), `attention_figure`, `plot_attention`;
- what the model knows: `score_sentences` ((pseudo-)log-likelihoods of many sentences), `load_blimp` and
  `evaluate_blimp` (BLiMP's minimal pairs);
- fine-tuning: `TaskSpec`, `FinetuneConfig`, `finetune_classifier`, `predict_texts`, `predict` (a file),
  `load_finetuned`, `glue` (every GLUE task, beside the from-scratch control); transformers: `export_hf`,
  `import_hf`.

Each CLI subcommand calls one of these (`nanobert.cli`). The names are imported lazily, so `import nanobert`
is cheap and has no side effects; each resolves on first use. No name is also a module's (importing a
submodule sets the package's attribute of that name): `nanobert.finetuning` is a package,
`finetune_classifier` the job in it.
"""

from importlib import import_module

__version__ = "0.1.0"

# name -> "module" (the same name in it) or "module:name"
_EXPORTS = {
    # data and tokens
    "load_documents": "nanobert.data.corpus",
    "train_tokenizer": "nanobert.tokenizer",
    "load_tokenizer": "nanobert.tokenizer",
    "save_tokenizer": "nanobert.tokenizer",
    "encode_pair": "nanobert.tokenizer",
    "encode_documents": "nanobert.tokenizer",
    "create_instances": "nanobert.data.nsp",
    "MaskingCollator": "nanobert.data.masking",
    # models
    "ModelConfig": "nanobert.config",
    "BertModel": "nanobert.model",
    "BertForPreTraining": "nanobert.model",
    "BertLMHeadModel": "nanobert.causal_model",
    "BertForSequenceClassification": "nanobert.model",
    # pretraining
    "TrainConfig": "nanobert.config",
    "PRESETS": "nanobert.pretraining.recipes",
    "preset_configs": "nanobert.pretraining.recipes",
    "DataSources": "nanobert.data.sources",
    "pretrain": "nanobert.pretraining.pretrain",
    "evaluate_checkpoint": "nanobert.objectives.evaluate",
    "curves_figure": "nanobert.use.plots",
    # using a checkpoint
    "load_pretraining_checkpoint": "nanobert.checkpoints.checkpoint",
    "load": "nanobert.use.inference",
    "InferenceModel": "nanobert.use.inference",
    "attention_figure": "nanobert.use.plots",
    "plot_attention": "nanobert.use.plots",
    # what the model knows
    "score_sentences": "nanobert.use.scoring",
    "load_blimp": "nanobert.use.blimp",
    "evaluate_blimp": "nanobert.use.blimp",
    # fine-tuning
    "FinetuneConfig": "nanobert.config",
    "TaskSpec": "nanobert.data.labelled",
    "finetune_classifier": "nanobert.finetuning.classification:finetune",
    "predict_texts": "nanobert.use.classifier",
    "predict": "nanobert.use.classifier",
    "load_finetuned": "nanobert.checkpoints.checkpoint",
    "glue": "nanobert.finetuning.glue",
    # transformers
    "export_hf": "nanobert.hf.export_hf",
    "import_hf": "nanobert.hf.import_hf",
    # errors
    "NanobertError": "nanobert.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        module, _, attribute = _EXPORTS[name].partition(":")
        return getattr(import_module(module), attribute or name)
    raise AttributeError(f"module 'nanobert' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
