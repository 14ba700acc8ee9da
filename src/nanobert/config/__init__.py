"""What is a run made of? Typed configuration: the model (Hugging Face `BertConfig` field names), the
pretraining run, the fine-tuning runs.

`ModelConfig` (model.py) uses the field names of transformers' `configuration_bert.py`. `TrainConfig`
(train.py) holds everything about a pretraining run, in sections by purpose (`SECTIONS`: what is learned, the
data, the start the recipe keeps, the optimiser, the length, the size rules, evaluation, the hardware).
`FinetuneConfig` and `QAConfig` (finetune.py) hold a fine-tuning run. A preset is a named pair of overrides
for the first two; `--set key=value` overrides any single field of either, with the value parsed by the
field's declared type (cli/overrides.py: typos and wrong types fail loudly, before any work). fields.py holds
the range checks and config.json's round trip.
"""

from nanobert.config.fields import PRECISIONS, config_from_dict, config_to_dict
from nanobert.config.finetune import FinetuneConfig, QAConfig
from nanobert.config.model import ModelConfig
from nanobert.config.train import SECTIONS, TrainConfig

__all__ = [
    "PRECISIONS",
    "SECTIONS",
    "FinetuneConfig",
    "QAConfig",
    "ModelConfig",
    "TrainConfig",
    "config_from_dict",
    "config_to_dict",
]
