"""Shared fixtures: the deliberately odd tiny config that keeps shape bugs from hiding."""

import pytest
import torch
from helpers import TINY_MODEL

from nanobert.config import ModelConfig


@pytest.fixture
def tiny_config() -> ModelConfig:
    # Odd sizes (vocab 99, hidden 32, 4 heads, intermediate 37) so no two dimensions coincide.
    return ModelConfig(**TINY_MODEL)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy CPU the threads' contention makes each
    step ten times slower; modules that train many tiny models use one thread
    (`pytestmark = pytest.mark.usefixtures("one_thread")`)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True, scope="session")
def _precision_cache(tmp_path_factory):
    """Measured precision choices go to a fresh cache per test session, not the user's ~/.cache."""
    import os

    os.environ["NANOBERT_CACHE"] = str(tmp_path_factory.mktemp("nanobert-cache"))
