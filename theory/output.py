"""Writing and reading results (the simulators' and the FL runs'): JSON that survives numpy types and NaN, JSON files
read back without a traceback, and CSV tables."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from theory.errors import InputError


def to_json(value):
    """numpy arrays and scalars as lists and numbers; NaN and inf as null (strict JSON)."""
    if isinstance(value, np.ndarray):
        return [to_json(v) for v in value.tolist()] if value.ndim else to_json(value.item())
    if isinstance(value, float | np.floating):
        return float(value) if np.isfinite(value) else None
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    return value


def write_csv(path: Path, header: Sequence[str], rows) -> None:
    """One CSV file: a header row, then the rows."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def read_object(path: Path, what: str) -> dict:
    """The JSON object in ``path``; a missing, unreadable, corrupt or non-object file is a one-line InputError
    naming ``what`` (e.g. "config.json of a run")."""
    try:
        value = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no {what}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"{path}: {what} is unreadable or not JSON ({type(error).__name__})") from None
    if not isinstance(value, dict):
        raise InputError(f"{path}: {what} is not a JSON object")
    return value
