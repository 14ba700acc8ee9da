"""nanobert: pretrain a BERT from scratch (MLM + NSP), then use, inspect, fine-tune and export it.

The public API is imported lazily, so `import nanobert` is cheap and has no side effects; the names below
resolve on first use.
"""

from importlib import import_module

__version__ = "0.1.0"

_EXPORTS = {
    "ModelConfig": "nanobert.config",
    "TrainConfig": "nanobert.config",
    "PRESETS": "nanobert.config",
    "BertModel": "nanobert.model",
    "BertForPreTraining": "nanobert.model",
    "BertForSequenceClassification": "nanobert.model",
    "NanobertError": "nanobert.errors",
    "train_tokenizer": "nanobert.tokenizer",
    "load_tokenizer": "nanobert.tokenizer",
    "load_documents": "nanobert.corpus",
    "DataSources": "nanobert.sources",
    "pretrain": "nanobert.train",
    "evaluate_checkpoint": "nanobert.evaluate",
    "load_pretraining_checkpoint": "nanobert.checkpoint",
    "load": "nanobert.inference",
    "InferenceModel": "nanobert.inference",
    "plot_attention": "nanobert.plots",
    "export_hf": "nanobert.hf_export",
    "import_hf": "nanobert.hf_export",
    "FinetuneConfig": "nanobert.config",
    "TaskSpec": "nanobert.finetune_data",
    "load_finetuned": "nanobert.checkpoint",
    "predict": "nanobert.finetune",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'nanobert' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
