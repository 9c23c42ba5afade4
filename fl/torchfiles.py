"""Reading the torch files a run or a method wrote (checkpoints, snapshots, generator weights, saved syntheses):
``torch.load(weights_only=True)`` only, and a file it refuses (a crafted pickle, a torn or foreign file) is one line
naming it, never torch's advice to retry with ``weights_only=False``, which is what such a file must never get."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from theory.errors import InputError

ADVICE = ("weights_only", "weights only", "torch.load", "documentation", "file an issue")


def first_reason(error: BaseException) -> str:
    """The line of a torch.load error that says what is wrong with the file, without torch's advice around it."""
    lines = [line.strip(" .") for line in str(error).splitlines()]
    kept = [line for line in lines if line and not any(word in line.lower() for word in ADVICE)]
    return (kept[0].split(". ")[0] if kept else type(error).__name__)[:200]


def load_safely(path: Path, what: str, fix: str, map_location: str | torch.device = "cpu"):
    """``torch.load(path, weights_only=True)``; a missing file or one that does not load safely is an InputError:
    "PATH: not a WHAT that loads safely (REASON); FIX"."""
    if Path(path).exists() and not Path(path).is_file():  # a FIFO or a device: torch.load would block or never end
        raise InputError(f"{path}: not a regular file, not a {what}; {fix}")
    try:
        with warnings.catch_warnings():  # a damaged file's odd "pickle protocol" is said by the error, in one line
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            return torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise InputError(f"{path}: no {what}; {fix}") from None
    except Exception as error:  # damaged bytes raise whatever the zip and pickle readers meet first
        raise InputError(f"{path}: not a {what} that loads safely ({first_reason(error)}); {fix}") from None
