"""Every config key with its type, default and meaning, read from the dataclasses themselves (fl.config's sections,
each built-in algorithm's hyper-parameters, each built-in method's keys), so the reference cannot drift from the code.

A section's meanings come from its class docstring, written as ``key: meaning. other_key: meaning ...`` (several
keys may share one meaning: ``subsample, test_subsample: ...`` or ``inner_lr / inner_lr_lr: ...``), in the
class that declares them or a base class; :func:`meanings` cuts the docstring at those
labels. The docs build (docs/hooks.py) renders :func:`markdown` into the config reference page.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import MISSING, Field, fields

from fl.algorithms import ALGORITHMS
from fl.config import DataConfig, LogConfig, ModelConfig, TrainConfig
from fl.methods import METHODS

SECTIONS = {"data": DataConfig, "model": ModelConfig, "train": TrainConfig, "log": LogConfig}


def meanings(doc: str, keys: list[str]) -> dict[str, str]:
    """``key -> meaning`` for each of ``keys`` labelled ``key:`` (alone or in a comma list) in ``doc``; the meaning
    runs to the next label. Keys with no label are absent."""
    if not keys:
        return {}
    names = "|".join(sorted(map(re.escape, keys), key=len, reverse=True))
    label = re.compile(rf"(?<![\w.`])((?:{names})(?:\s*[,/]\s*(?:{names}))*):\s")
    found = list(label.finditer(doc))
    if not found:
        return {}
    out: dict[str, str] = {}
    ends = [m.start() for m in found[1:]] + [len(doc)]
    for here, end in zip(found, ends, strict=True):
        text = doc[here.end() : end]
        for key in re.split(r"\s*[,/]\s*", here.group(1)):
            out.setdefault(key, " ".join(text.split()))
    return out


def default(f: Field) -> object:
    """A field's default value (its factory called)."""
    return f.default_factory() if f.default is MISSING and f.default_factory is not MISSING else f.default


def rows(cls: type, prefix: str) -> list[tuple[str, str, str, str]]:
    """(dotted key, type, default, meaning) of each public field of the dataclass ``cls``."""
    public = [f for f in fields(cls) if not f.name.startswith("_")]
    said: dict[str, str] = {}
    for owner in cls.__mro__:  # a key documented where it is declared (Fedssyn's in FedssynConfig)
        said = meanings(inspect.cleandoc(owner.__doc__ or ""), [f.name for f in public]) | said
    type_name = {
        f.name: f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type)) for f in public
    }
    return [(f"{prefix}.{f.name}", type_name[f.name], repr(default(f)), said.get(f.name, "")) for f in public]


def every_key() -> dict[str, list[tuple[str, str, str, str]]]:
    """Table title -> its rows: the four sections, then ``[algorithm]`` per algorithm and ``[method]`` per method."""
    tables = {f"[{name}]": rows(cls, name) for name, cls in SECTIONS.items()}
    for name, cls in ALGORITHMS.items():
        tables[f'[algorithm] name = "{name}"'] = rows(cls, "algorithm")
    for name, cls in METHODS.items():
        tables[f'[method] name = "{name}"'] = rows(cls, "method")
    return tables


ROLE = re.compile(r":(?:mod|class|meth|func|attr|data|obj|exc):`~?([^`<]+?)(?:\s*<[^`>]+>)?`")


def cell(text: str) -> str:
    """``text`` as one Markdown table cell: its Sphinx roles as code, pipes escaped."""
    return ROLE.sub(r"`\1`", text).replace("|", "\\|").replace("\n", " ")


def markdown() -> str:
    """The reference as Markdown tables, one per section, algorithm and method."""
    out = []
    for title, table in every_key().items():
        out += [f"### `{title}`", ""]
        if not table:
            out += ["No keys of its own.", ""]
            continue
        out += ["| key | type | default | meaning |", "|---|---|---|---|"]
        out += [f"| `{k}` | {cell(t)} | `{cell(d)}` | {cell(m)} |" for k, t, d, m in table]
        out.append("")
    return "\n".join(out)
