"""A user's own code named in a config by import path: ``"package.module:Name"`` beside the built-in names.

``method.name``, ``algorithm.name``, ``model.name``, ``data.partition`` and ``data.dataset`` accept such a path (the
"module:attribute" form of Python entry points). The module is imported from the environment or, failing that,
from the working directory (appended to ``sys.path``, so it never shadows an installed package); the built-in
registry is looked in first, so a built-in name never means a plug-in. :func:`resolve` checks what it finds, each
failure one line naming the config key: not importable, no such attribute, not what the key needs (a subclass of
the base class, a callable), a dataclass field without a default.

An installed package may also register a plug-in under a short name, as a Python entry point in the group
:data:`GROUPS` names for the key (``[project.entry-points."shufflefl.methods"] noisy = "mypkg.noisy:Noisy"``):
:func:`entry_point` turns ``method.name = "noisy"`` into the path it stands for when no built-in has that name,
and the run's config.json records the path, so everything below holds for it unchanged.

A plug-in's code is part of what made a run: :func:`source_hash` is a hash of its module's syntax (every ``.py``
file of it, and of the user's modules it imports, wherever on ``sys.path`` or through ``importlib.import_module``
with a literal name: :func:`own_files`; docstrings dropped, as :func:`fl.provenance.code_version` hashes ours),
which ``provenance.json`` and the run's identity keep, so ``--resume`` refuses a run whose plug-in changed. Not
covered: a helper imported by a name computed at run time, loaded from a file path, or found only through a folder
the plug-in adds to ``sys.path`` itself (keep such a helper in the plug-in's package). Our own ``code_version`` covers
``fl`` and ``theory`` only: adding a plug-in never changes it. A module whose file changed since it was imported
is imported again, so a process always runs the code its hash names.

A config read from a data file (a run folder's config.json, the ledger, a lease's records) could name a module that
came with the data. So before anything is imported, :func:`locate` finds the files the import would run, as the
import system would (its own finders: a ``.py`` file, a ``.pyc`` without its source, an extension module by any of
:func:`importlib.machinery.all_suffixes`, a package's ``__init__`` in any of those forms, a namespace package's
folders) but without running any, and :func:`written_folder` refuses (one line) a module whose file lies in a folder
the package writes: a run folder, a sweep, the run ledger, a lease's records or a run store (``$SHUFFLEFL_RUNS``). A
plug-in comes only from where its user installed or wrote it. Where a resumed run recorded the plug-in's hash,
:func:`expecting` has it compared with the located files before the import. What only reads records (the ledger's
check, :mod:`lab.records.check`) imports no plug-in at all (:func:`importing_nothing`): it compares paths and hashes.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import importlib
import importlib.machinery
import importlib.metadata
import os
import re
import site
import sys
import sysconfig
from pathlib import Path

import theory.datafolder as datafolder
from fl.provenance import syntax_digest
from theory.errors import InputError, register_user_code

PATTERN = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
RESERVED = ("npz:",)  # data.dataset = "npz:PATH" is a file of arrays, not a plug-in
GROUPS = {  # config key -> the entry-point group an installed package registers its plug-ins in
    "method.name": "shufflefl.methods",
    "algorithm.name": "shufflefl.algorithms",
    "model.name": "shufflefl.models",
    "data.partition": "shufflefl.partitions",
    "data.dataset": "shufflefl.datasets",
}
_IMPORTED: dict[str, str] = {}  # module name -> source hash when it was (last) imported here
_EXPECTED: dict[str, str] = {}  # plug-in path -> the hash a resumed run recorded (expecting)
_INERT: list[str] = []  # while not empty, why no plug-in may be imported (importing_nothing)
OURS = (
    "fl",
    "lab",
    "theory",
    "figures",
    "sims",
    "plots",
    "benchmarks",
)  # never a plug-in's own code


def is_plugin(name: object) -> bool:
    """Whether a config value names a plug-in (``module:Name``) rather than a built-in."""
    return isinstance(name, str) and ":" in name and not name.startswith(RESERVED)


def _path_state() -> tuple:
    """sys.path and each folder's modification time: installing a distribution adds a folder to one of them."""

    def mtime(entry: str) -> int | None:
        try:
            return os.stat(entry or ".").st_mtime_ns
        except OSError:
            return None

    return tuple((entry, mtime(entry)) for entry in sys.path)


@functools.lru_cache(maxsize=32)
def _scan(group: str, state: tuple) -> dict[str, frozenset[str]]:
    names: dict[str, set[str]] = {}
    for point in importlib.metadata.entry_points(group=group):
        names.setdefault(point.name, set()).add(point.value)
    return {name: frozenset(values) for name, values in names.items()}


def registered(group: str) -> dict[str, frozenset[str]]:
    """name -> the ``package.module:Name`` values the installed distributions register in entry-point ``group``.
    Reading them scans every distribution's metadata (~15 ms with 170 installed), and checking a run's config asks
    once per key (the ledger's check: ~900 times), so the answer is kept while sys.path and its folders stay as they
    were (:func:`_path_state`)."""
    return _scan(group, _path_state())


def entry_point(key: str, name: object) -> str | None:
    """The ``package.module:Name`` an installed package registers as ``name`` in ``key``'s entry-point group
    (:data:`GROUPS`), None where none does; two packages registering one name is a one-line InputError."""
    if not isinstance(name, str) or not name or ":" in name:
        return None
    found = sorted(registered(GROUPS[key]).get(name, ()))
    if len(found) > 1:
        packages = ", ".join(found)
        raise InputError(
            f"config {key}: {name!r} is registered by several installed packages ({packages}); give a path"
        )
    return found[0] if found else None


def installed_distribution(path: Path, module_name: str) -> str | None:
    """``NAME==VERSION`` of the installed distribution whose file ``path`` is (a module in site-packages), else
    None: such a plug-in is recorded by name and version, not by its files."""
    roots = {Path(p).resolve() for key in ("purelib", "platlib") if (p := sysconfig.get_paths().get(key))}
    roots |= {Path(p).resolve() for p in site.getsitepackages() if p} if hasattr(site, "getsitepackages") else set()
    if not any(root in path.resolve().parents for root in roots):
        return None
    top = module_name.split(".")[0]
    names = importlib.metadata.packages_distributions().get(top) or [top]
    try:
        return f"{names[0]}=={importlib.metadata.version(names[0])}"
    except importlib.metadata.PackageNotFoundError:
        return f"{names[0]}==unknown"


def imported_names(tree: ast.AST) -> list[str]:
    """The absolute module names a module's syntax imports: ``import`` and ``from ... import`` statements (relative
    ones excepted: they stay in the package), and ``importlib.import_module(NAME)`` or ``__import__(NAME)`` calls
    whose first argument is a literal string. A name computed at run time, or a module loaded from a file path
    (``importlib.util.spec_from_file_location``), is not seen: such a helper is not in the plug-in's hash."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
        elif isinstance(node, ast.Call) and node.args:
            func, first = node.func, node.args[0]
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in ("import_module", "__import__") and isinstance(first, ast.Constant):
                if isinstance(first.value, str) and not first.value.startswith("."):
                    names.append(first.value)
    return names


def _stdlib_roots() -> set[Path]:
    return {Path(p).resolve() for key in ("stdlib", "platstdlib") if (p := sysconfig.get_paths().get(key))}


def helper_files(top: str) -> list[Path]:
    """The source files of the top-level module or package ``top`` as the import would find it on ``sys.path``
    (:func:`find_spec`, nothing run) when it is a user's code: none for the standard library, an installed
    distribution's module (its version is its identity) or a compiled module, or where nothing is found."""
    if top in OURS or top in sys.builtin_module_names or top in getattr(sys, "stdlib_module_names", ()):
        return []
    try:
        spec = find_spec(top, None)
    except (ImportError, ValueError, OSError, KeyError):
        return []
    if spec is None:
        return []
    folders = [Path(f) for f in spec.submodule_search_locations or ()]
    origin = Path(spec.origin) if spec.has_location and spec.origin else None
    first = origin or (folders[0] if folders else None)
    stdlib = _stdlib_roots()
    if first is None or any(root in first.resolve().parents for root in stdlib):
        return []
    if installed_distribution(first, top):
        return []
    if folders:  # a package (or a namespace package's folders): all of it, as a plug-in's own package
        return sorted({f for folder in folders if folder.is_dir() for f in folder.rglob("*.py")})
    return [origin] if origin is not None and origin.suffix == ".py" else []


def own_files(path: Path, module_name: str) -> list[Path]:
    """The source files that are the plug-in's own code: every ``.py`` file of its top-level package, or, for a
    module at the top level, its file; then, followed from every file found, the user's modules they import (and
    those import): beside the file first, else wherever the import finds them on ``sys.path`` (another folder of
    the path, the working directory; ``importlib.import_module`` with a literal name included: see
    :func:`imported_names`), never ours, the standard library's or an installed distribution's (see
    :func:`installed_distribution`). None for a compiled module or an installed distribution's. A helper imported
    by a name computed at run time, from a file path, or from a folder the plug-in adds to ``sys.path`` itself is
    not covered: keep such a helper in the plug-in's own package."""
    if path.suffix != ".py" or installed_distribution(path, module_name):
        return []
    parts = module_name.split(".")
    up = len(parts) - 1 if path.name == "__init__.py" else len(parts) - 2
    # inside a package: the whole top-level package is the plug-in's
    found: list[Path] = sorted(path.parents[up].rglob("*.py")) if up >= 0 else []
    todo, seen = [path, *found], set()
    while todo:
        file = todo.pop()
        if file in seen:
            continue
        seen.add(file)
        if file not in found:
            found.append(file)
        try:
            tree = ast.parse(file.read_text(), str(file))
        except (SyntaxError, ValueError, OSError):
            continue
        for name in imported_names(tree):
            top = name.split(".")[0]
            if top in OURS:  # this package's code: its own code_version covers it
                continue
            beside = file.parent / f"{top}.py"
            if beside.is_file():
                todo.append(beside)
            elif (file.parent / top).is_dir():
                more = [f for f in sorted((file.parent / top).rglob("*.py")) if f not in found]
                found.extend(more)
                todo.extend(more)
            else:
                todo.extend(helper_files(top))
    return sorted(found)


def module_files(module) -> list[Path]:
    """The source files of an imported plug-in module that are its own code (:func:`own_files`)."""
    file = getattr(module, "__file__", None)
    return own_files(Path(file), module.__name__) if file else []


def fingerprint(path: Path, module_name: str) -> str | None:
    """What identifies a plug-in's code: the hash of its own files, or its installed distribution's name and
    version."""
    files = own_files(path, module_name)
    return installed_distribution(path, module_name) or (digest(files) if files else None)


def digest(files: list[Path]) -> str:
    """12 hex digits over the syntax of ``files`` (:func:`fl.provenance.syntax_digest`, by file name)."""
    return syntax_digest((path.name, path) for path in files)


def find_spec(name: str, path: list[str] | None):
    """The spec the import system would find for the module ``name`` (top-level: ``path`` None, on ``sys.path``; a
    submodule: ``path`` its package's folders), asking each finder of ``sys.meta_path`` in turn as the import does
    (built-ins, frozen modules, every path entry's finder: ``.py``, ``.pyc`` without a source, extension modules by
    every suffix of :func:`importlib.machinery.all_suffixes`, packages, namespace packages, zip files), without
    loading it: finding runs none of the module's code. None where no finder finds it."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        try:
            spec = find(name, path, None) if find is not None else None
        except KeyError:
            if path is None:
                raise
            # a namespace package in a package not imported: the path finder found no module of the name and
            # reads the parent's folders from the imported parent; they are ``path``, so its folders are these
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            tail = name.rpartition(".")[2]
            spec.submodule_search_locations = [str(Path(e) / tail) for e in path if (Path(e) / tail).is_dir()]
        if spec is not None:
            return spec
    return None


def locate(module_name: str) -> list[Path]:
    """The files importing ``module_name`` would run (each package's ``__init__`` on the way, then the module's
    file, in whichever form the import finds it: source, compiled, extension) and the folders of each namespace
    package on the way, found as the import system finds them (:func:`find_spec`) without running any; modules
    already imported by their own ``__file__`` (``__path__``). Stops where nothing is found (the import then fails
    as it will)."""
    importlib.invalidate_caches()  # a file written since the last import is seen, as the import will see it
    found: list[Path] = []
    search: list[str] | None = None  # None: sys.path (a top-level module)
    parts = module_name.split(".")
    for k in range(1, len(parts) + 1):
        name = ".".join(parts[:k])
        module = sys.modules.get(name)
        if module is not None:
            origin, portions = getattr(module, "__file__", None), getattr(module, "__path__", None)
        else:
            spec = find_spec(name, search)
            if spec is None:
                break
            origin = spec.origin if spec.has_location else None
            portions = spec.submodule_search_locations
        if origin:
            found.append(Path(origin))
        elif portions is not None:  # a namespace package runs nothing of its own: where its modules are found counts
            found.extend(Path(folder) for folder in portions)
        if portions is None:  # a module, not a package: nothing below it is imported
            break
        search = [str(folder) for folder in portions]
    return found


def is_data_folder(folder: Path) -> bool:
    """The one rule of what the package wrote (:func:`theory.datafolder.is_data_folder`): a run, a sweep finished or
    not, the ledger, a lease's records, any CLI's output folder, a run store's folders, a generator cache."""
    return datafolder.is_data_folder(str(folder))


def written_folder(file: Path) -> Path | None:
    """The folder the package wrote that ``file`` (or the folder ``file``: a namespace package's) lies in or is,
    however deep (:func:`theory.datafolder.written_folder`; also a run store given by ``$SHUFFLEFL_RUNS``), or
    None."""
    found = datafolder.written_folder(str(file))
    return None if found is None else Path(found)


@contextlib.contextmanager
def importing_nothing(why: str):
    """While records are read and checked (the ledger's check): no plug-in is imported, not even one imported
    already; resolving or hashing one is a one-line InputError ending with ``why``. What a check compares of a
    plug-in is its path and the hash its run recorded, never its code."""
    _INERT.append(why)
    try:
        yield
    finally:
        _INERT.pop()


def _refuse_if_inert(key: str, spec: str) -> None:
    if _INERT:
        raise InputError(f"config {key}: {spec!r} names a plug-in, not imported: {_INERT[-1]}")


@contextlib.contextmanager
def expecting(recorded: dict):
    """While a resumed run builds its config: each plug-in it recorded (``provenance.json``'s ``plugins``, by key:
    {"spec", "sha256"}) must hash as recorded before its module is imported (a changed plug-in never runs)."""
    saved = dict(_EXPECTED)
    _EXPECTED.update({e["spec"]: e["sha256"] for e in recorded.values() if isinstance(e, dict) and e.get("spec")
                      and isinstance(e.get("sha256"), str)})  # fmt: skip
    try:
        yield
    finally:
        _EXPECTED.clear()
        _EXPECTED.update(saved)


def located_fingerprint(module_name: str) -> str | None:
    """:func:`fingerprint` of ``module_name`` before it is imported, from :func:`locate`'s last file (the module's)."""
    files = locate(module_name)
    last = files[-1] if files else None
    if last is None or (last.stem if last.name != "__init__.py" else last.parent.name) != module_name.split(".")[-1]:
        return None
    return fingerprint(last, module_name)


def _import(module_name: str, key: str, spec: str):
    _refuse_if_inert(key, spec)
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.append(cwd)  # "importable from the working directory", after everything installed
    try:
        located = locate(module_name)
    except (ImportError, OSError, ValueError) as error:  # a finder failed: the import would fail the same way
        raise InputError(f"config {key}: cannot import {spec!r} ({type(error).__name__}: {error})") from None
    finally:  # a folder this package wrote is searched only to refuse what lies there, never left on the path
        if added and written_folder(Path(cwd)) is not None:
            sys.path.remove(cwd)
    for file in located:
        folder = written_folder(file)
        if folder is not None:
            where = f"{file}, which is" if folder == file.resolve() else f"{file}, which lies in {folder},"
            raise InputError(
                f"config {key}: {spec!r} would be imported from {where} a folder this package writes (a run, a "
                "sweep, the ledger, a lease or a run store); a plug-in runs only from where you put it: refused, "
                "nothing imported"
            )
    if spec in _EXPECTED:  # imported or not: a changed file would be (re)imported, so compare before
        now = located_fingerprint(module_name)
        if now != _EXPECTED[spec]:
            raise InputError(
                f"plug-in {spec} ({key}) is code {now} now, the run started with {_EXPECTED[spec]}; refused before "
                "importing it: restore it, start the run over, or resume with --accept-code-change"
            )
    try:
        module = importlib.import_module(module_name)
        files = module_files(module)
        current = digest(files) if files else None
        if current is not None and _IMPORTED.setdefault(module_name, current) != current:
            module = importlib.reload(module)  # its file changed since: run the code the hash names
            _IMPORTED[module_name] = current
        register_user_code(files, spec)  # its failures are told as its own (theory.cli.guarded)
    except ModuleNotFoundError as error:
        where = "the working directory or the environment"
        raise InputError(f"config {key}: cannot import {spec!r} ({error}); put it in {where}") from None
    except InputError:
        raise
    except Exception as error:  # the module's own code failed: a SyntaxError, an error at import time
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise InputError(f"config {key}: importing {module_name} failed ({type(error).__name__}: {first})") from None
    return module


def resolve(spec: str, key: str, base: type | None = None, what: str = "a class"):
    """The object ``spec`` = "package.module:Name" names, checked for ``key``: with ``base``, a subclass of it that
    is a dataclass whose fields all have defaults (its config keys); without, a callable."""
    if not PATTERN.fullmatch(spec):
        raise InputError(f"config {key}: {spec!r} is not a plug-in path; write package.module:Name")
    module_name, attribute = spec.split(":")
    found = _import(module_name, key, spec)
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise InputError(f"config {key}: module {module_name} has no {attribute!r}")
        found = getattr(found, part)
    if base is None:
        if not callable(found):
            raise InputError(f"config {key}: {spec} is not callable (it must be {what})")
        return found
    if not (isinstance(found, type) and issubclass(found, base)):
        raise InputError(f"config {key}: {spec} is not a subclass of {base.__module__}.{base.__qualname__}")
    if dataclasses.is_dataclass(base) and "__dataclass_fields__" not in vars(found):
        raise InputError(f"config {key}: {spec} must be decorated @dataclass(frozen=True) (its fields are its keys)")
    if dataclasses.is_dataclass(found):
        bare = [f.name for f in dataclasses.fields(found)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]  # fmt: skip
        if bare:
            raise InputError(f"config {key}: {spec}'s fields {', '.join(bare)} have no default; give every field one")
    return found


def source_hash(spec: str) -> dict:
    """What a run records of the plug-in ``spec`` (imported already): its module's files and their hash."""
    module_name = spec.split(":")[0]
    _refuse_if_inert("plug-in", spec)
    module = sys.modules.get(module_name) or _import(module_name, "plug-in", spec)
    file = getattr(module, "__file__", None)
    if not file:
        return {"spec": spec, "sha256": None, "files": []}
    files = own_files(Path(file), module_name)
    return {"spec": spec, "sha256": fingerprint(Path(file), module_name), "files": [str(f) for f in files]}
