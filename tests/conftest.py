"""Shared fixtures: the deliberately odd tiny config that keeps shape bugs from hiding."""

import pytest
import torch
from helpers import TINY_MODEL

from nanobert.config import ModelConfig


@pytest.fixture
def tiny_config() -> ModelConfig:
    # Odd sizes (vocab 99, hidden 32, 4 heads, intermediate 37) so no two dimensions coincide.
    return ModelConfig(**TINY_MODEL)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True, scope="session")
def _precision_cache(tmp_path_factory):
    """Measured precision choices go to a fresh cache per test session, not the user's ~/.cache."""
    import os

    os.environ["NANOBERT_CACHE"] = str(tmp_path_factory.mktemp("nanobert-cache"))
