"""Fixtures for every test."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """The fl tests use tiny models and tensors: one intra-op thread is much faster there (about 100x on a 2-core
    machine for the smallest) and does not stall when the cores are busy; the caller's setting is restored."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
