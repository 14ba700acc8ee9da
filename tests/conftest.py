"""Shared fixtures: the deliberately odd tiny config that keeps shape bugs from hiding."""

import pytest
import torch

from nanobert.config import ModelConfig


@pytest.fixture
def tiny_config() -> ModelConfig:
    # Odd sizes (vocab 99, hidden 32, 4 heads, intermediate 37) so no two dimensions coincide.
    return ModelConfig(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=64,
    )


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
