"""A Griffe extension for the docs build: the Sphinx roles of our docstrings (:mod:`fl.flat`, :meth:`Algorithm.step`,
:class:`~fl.models.SplitModel`, :meth:`title <fl.x.Y.z>`) become cross-references, not raw text.

A role's target is resolved as Python would resolve its first name in the docstring's scope (a member, an import, a
name of an enclosing class or module), so ``:meth:`Algorithm.correction``` in fl.config links to
fl.algorithms.base.Algorithm.correction. Each becomes an *optional* autoref: a link where the target has a page,
the name in code font where it has none (a torch function, a module without a reference page), never a warning.
Doctest examples (``>>>`` lines and their output, to the next blank line) are shown as code blocks, not Markdown.
"""

from __future__ import annotations

import html
import re

import griffe

KINDS = "mod|class|meth|func|attr|data|obj|exc|const"
ROLE = re.compile(rf"(?<![\w`]):(?:py:)?(?:{KINDS}):`(~?)([^`<>]+?)(?:\s*<([^`<>]+)>)?`")


def target(obj: griffe.Object, name: str) -> str:
    """The full path of ``name`` as seen from ``obj``'s docstring, or ``name`` itself where it does not resolve."""
    head, _, rest = name.partition(".")
    try:
        path = obj.resolve(head)
    except (griffe.NameResolutionError, AttributeError, KeyError):
        return name
    return f"{path}.{rest}" if rest else path


def rewrite(obj: griffe.Object, text: str) -> str:
    """``text`` with every role replaced by an optional autoref to its target."""

    def link(match: re.Match) -> str:
        short, shown, name = match.group(1) == "~", match.group(2).strip(), match.group(3)
        name = (name or shown).strip()
        shown = shown.rsplit(".", 1)[-1] if short else shown
        identifier = html.escape(target(obj, name), quote=True)
        return f'<autoref identifier="{identifier}" optional><code>{html.escape(shown)}</code></autoref>'

    return fence_doctests(ROLE.sub(link, text))


def fence_doctests(text: str) -> str:
    """``text`` with each doctest example (from a ``>>>`` line to the next blank line) in a ``pycon`` code block."""
    out: list[str] = []
    fenced = inside = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not fenced and not inside and line.lstrip().startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}```pycon")
            inside = True
        elif inside and not line.strip():
            out.append(f"{indent}```")
            inside = False
        out.append(line)
    if inside:
        out.append(f"{indent}```")
    return "\n".join(out)


class RolesToLinks(griffe.Extension):
    """Rewrites every docstring of a loaded package once it is complete (names resolve across its modules)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: object) -> None:
        seen: set[int] = set()
        stack: list[griffe.Object] = [pkg]
        while stack:
            obj = stack.pop()
            if id(obj) in seen or obj.is_alias:
                continue
            seen.add(id(obj))
            if obj.docstring is not None:
                obj.docstring.value = rewrite(obj, obj.docstring.value)
            stack.extend(member for member in obj.members.values() if not member.is_alias)
