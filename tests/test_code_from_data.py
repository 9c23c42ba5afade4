"""No code runs from a data folder, in whatever form Python would import it (issue 69, item 2): a plug-in found as a
compiled ``.pyc``, a package (its ``__init__`` as source or compiled), a namespace package or an extension module
(every suffix of importlib.machinery.EXTENSION_SUFFIXES) in a run folder, a copy of the run ledger or a run store
is refused in one line before anything of it runs; and the ledger's check (``python -m figures check``,
lab.records.check.verify) imports no plug-in a record names, even one that lies where a user's plug-in would. Each
payload writes a marker file when it runs; each test asserts the marker is absent, and a control asserts that each
form does run (the marker appears) where it lies outside any data folder."""

from __future__ import annotations

import importlib.machinery
import json
import py_compile
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from figures.__main__ import main as figures_main
from fl import plugins
from fl.methods import Method
from fl.run import main as run_main
from lab.records.check import ENTRY, sealed, verify
from lab.records.ledger import record_entries
from theory.errors import InputError
from theory.output import file_sha256

ROOT = Path(__file__).resolve().parents[1]
LEDGER = ROOT / "results" / "ledger"
NAMED_RUN = "runs/dynafed_fmnist_a001_code_w32_r50_n0_dsa"  # entries of the shipped ledger a test edits (in a copy)
KEYED_RUN = "_runs/0483144d7966"
FORMS = (
    "pyc",
    "package",
    "package-pyc",
    "namespace",
    *(f"extension{s}" for s in importlib.machinery.EXTENSION_SUFFIXES),
)


def payload(marker: Path) -> str:
    """A plug-in module (a method ``M``, and what every other key takes) whose import writes ``marker``."""
    return textwrap.dedent(
        f"""
        from pathlib import Path
        Path({str(marker)!r}).write_text("ran")
        from dataclasses import dataclass
        from fl.methods import Method

        @dataclass(frozen=True)
        class M(Method):
            name = "m"
        """
    )


def compiler() -> str | None:
    include = Path(sysconfig.get_paths()["include"])
    return shutil.which("cc") if (include / "Python.h").is_file() else None


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """name + suffix -> a real extension module of that name whose initialisation writes the file $EVIL_MARKER
    names (compiled once per module name); bytes that only look like one where no C compiler is at hand (the import
    finds the file as an extension all the same)."""
    folder, cache = tmp_path_factory.mktemp("extensions"), {}

    def build(name: str, suffix: str) -> Path:
        if (name, suffix) in cache:
            return cache[name, suffix]
        target = folder / f"{name}{suffix}"
        cc = compiler()
        if cc is None:
            target.write_bytes(b"\x7fELF not really")
        else:
            source = folder / f"{name}.c"
            source.write_text(textwrap.dedent(f"""
                #include <Python.h>
                #include <stdio.h>
                #include <stdlib.h>
                static struct PyModuleDef definition = {{PyModuleDef_HEAD_INIT, "{name}", NULL, -1, NULL}};
                PyMODINIT_FUNC PyInit_{name}(void) {{
                    const char *path = getenv("EVIL_MARKER");
                    FILE *marker = path ? fopen(path, "w") : NULL;
                    if (marker) {{ fputs("ran", marker); fclose(marker); }}
                    return PyModule_Create(&definition);
                }}
            """))  # fmt: skip
            include = sysconfig.get_paths()["include"]
            subprocess.run([cc, "-shared", "-fPIC", f"-I{include}", "-o", str(target), str(source)], check=True)
        cache[name, suffix] = target
        return target

    return build


def plant(folder: Path, form: str, name: str, marker: Path, built) -> str:
    """The plug-in ``name`` in ``form`` in ``folder`` (``built``: the extension modules); the module path a config
    names it by."""
    code = payload(marker)
    if form in ("pyc", "package-pyc"):
        where = folder / name if form == "package-pyc" else folder
        where.mkdir(exist_ok=True)
        source = where / ("__init__.py" if form == "package-pyc" else f"{name}.py")
        source.write_text(code)
        py_compile.compile(str(source), cfile=str(source.with_suffix(".pyc")), doraise=True)
        source.unlink()  # a .pyc alone beside no source: the import runs it
        shutil.rmtree(where / "__pycache__", ignore_errors=True)
        return name
    if form == "package":
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text(code)
        return name
    if form == "namespace":
        (folder / name).mkdir()
        (folder / name / "inner.py").write_text(code)
        return f"{name}.inner"
    shutil.copy2(built(name, form.removeprefix("extension")), folder)
    return name


@pytest.fixture()
def user(tmp_path, monkeypatch):
    """sys.path and the working directory restored after; every module a test planted forgotten."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EVIL_MARKER", str(tmp_path / "MARKER"))  # where an extension module's payload writes
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith(("evil", "marker_mod")):
            del sys.modules[name]


def run_folder(base: Path) -> Path:
    run = base / "evilrun"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"method": {"name": "evil:M"}, "train": {"rounds": 2}}))
    (run / "metrics.jsonl").write_text("")
    return run


def data_folder(kind: str, user: Path, monkeypatch) -> Path:
    """A folder the package writes: a run folder, a copy of the run ledger (its root), a bare run store."""
    if kind == "run folder":
        return run_folder(user)
    if kind == "ledger copy":
        if not (LEDGER / ".ledger").exists():
            pytest.skip("no results/ledger")
        shutil.copytree(LEDGER, user / "ledger", ignore=shutil.ignore_patterns("_runs", "runs"))
        return user / "ledger"
    (user / "store").mkdir()
    monkeypatch.setenv("SHUFFLEFL_RUNS", str(user / "store"))
    return user / "store"


def name_for(form: str) -> str:
    return "evil_" + "".join(c if c.isalnum() else "_" for c in form)


@pytest.mark.parametrize("kind", ["run folder", "ledger copy", "store"])
@pytest.mark.parametrize("form", FORMS)
def test_a_plugin_in_a_data_folder_is_refused_in_every_form_with_nothing_run(user, monkeypatch, built, form, kind):
    folder = data_folder(kind, user, monkeypatch)
    marker = user / "MARKER"
    module = plant(folder, form, name_for(form), marker, built)
    monkeypatch.chdir(folder)  # the working directory is on the import path: where a run's own config leads
    with pytest.raises(InputError, match=r"a folder this package writes.*refused, nothing imported"):
        plugins.resolve(f"{module}:M", "method.name", Method)
    assert not marker.exists() and module not in sys.modules and module.split(".")[0] not in sys.modules


@pytest.mark.parametrize("form", FORMS)
def test_each_form_runs_where_a_user_put_it(user, built, form):
    """The control: the same payload, in the same form, in a folder of the user's own, runs when resolved."""
    if form.startswith("extension") and compiler() is None:
        pytest.skip("no C compiler: the extension planted is not a real one")
    marker = user / "MARKER"
    (user / "mine").mkdir()
    module = plant(user / "mine", form, name_for(form) + "_mine", marker, built)
    sys.path.insert(0, str(user / "mine"))
    found = plugins.resolve(f"{module}:M", "method.name", Method) if not form.startswith("extension") else None
    if found is None:  # an extension module has no M: importing it is what runs its code
        with pytest.raises(InputError, match="has no 'M'"):
            plugins.resolve(f"{module}:M", "method.name", Method)
    assert marker.read_text() == "ran"


def test_fl_run_resume_in_a_run_folder_holding_a_pyc_is_one_line_and_runs_nothing(user, monkeypatch, built, capsys):
    run = run_folder(user)
    marker = user / "MARKER"
    plant(run, "pyc", "evil", marker, built)
    monkeypatch.chdir(run)  # the working directory is on the import path: the config's evil:M leads to evil.pyc
    assert run_main(["--resume", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "evil.pyc" in err and "refused, nothing imported" in err
    assert not marker.exists() and "evil" not in sys.modules


def test_nothing_is_imported_while_importing_nothing_not_even_a_module_imported_already():
    with plugins.importing_nothing("checking"), pytest.raises(InputError, match="not imported: checking"):
        plugins.resolve("json:dumps", "data.partition")
    with plugins.importing_nothing("checking"), pytest.raises(InputError, match="not imported: checking"):
        plugins.source_hash("json:dumps")
    assert plugins.resolve("json:dumps", "data.partition", what="a partitioner") is json.dumps


# --- the ledger's check ---------------------------------------------------------------------------------------------

PLUGGED = {  # every key a plug-in may stand in, each named in the user's module that writes the marker on import
    ("method", "name"): "marker_mod:M",
    ("algorithm", "name"): "marker_mod:A",
    ("model", "name"): "marker_mod:Model",
    ("data", "partition"): "marker_mod:part",
    ("data", "dataset"): "marker_mod:data",
}


@pytest.fixture()
def ledger_copy(user):
    """A copy of results/ledger and, in the working directory (where a user's plug-in lies, importable), the
    module ``marker_mod`` whose import writes the marker."""
    if not (LEDGER / KEYED_RUN / "summary.json").exists():
        pytest.skip("no results/ledger")
    shutil.copytree(LEDGER, user / "ledger")
    (user / "marker_mod.py").write_text(payload(user / "MARKER"))
    sys.path.append(str(user))
    return user / "ledger"


def name_plugins(entry: Path, provenance: bool, reseal: bool, module: str = "marker_mod") -> None:
    """The entry's config naming a plug-in of ``module`` in every key (with its own key for the method); with
    ``provenance``, its provenance.json recording them by path and hash as fl.run does; with ``reseal``, its
    ledger.json re-sealed over the edited files (as ``ledger add`` would have written it)."""
    plugged = {key: spec.replace("marker_mod", module) for key, spec in PLUGGED.items()}
    config = json.loads((entry / "config.json").read_text())
    for (section, key), spec in plugged.items():
        config[section][key] = spec
    config["method"] = {"name": plugged["method", "name"], "sigma": 0.5}
    config["algorithm"] = {"name": plugged["algorithm", "name"], "server_lr": 0.5}
    config["algorithm_fields"] = {"name": plugged["algorithm", "name"], "server_lr": 0.5}
    (entry / "config.json").write_text(json.dumps(config, indent=2))
    if provenance:
        record = json.loads((entry / "provenance.json").read_text())
        record["plugins"] = {f"{s}.{k}": {"spec": spec, "sha256": "0123456789ab", "files": ["marker_mod.py"]}
                             for (s, k), spec in plugged.items()}  # fmt: skip
        (entry / "provenance.json").write_text(json.dumps(record, indent=2))
    if reseal:  # the run's own digests of its records, its ledger.json and the ledger's manifest, as if added so
        provenance = json.loads((entry / "provenance.json").read_text())
        if "config_sha256" in provenance:
            provenance["config_sha256"] = file_sha256(entry / "config.json")
            (entry / "provenance.json").write_text(json.dumps(provenance, indent=2))
        summary = json.loads((entry / "summary.json").read_text()) if (entry / "summary.json").is_file() else {}
        if "provenance_sha256" in summary:
            summary["provenance_sha256"] = file_sha256(entry / "provenance.json")
            (entry / "summary.json").write_text(json.dumps(summary, indent=2))
        record = json.loads((entry / ENTRY).read_text())
        files = [entry / name for name in record["files"]]
        (entry / ENTRY).write_text(json.dumps(sealed(record, files), indent=2))
        record_entries(entry.parent.parent, [entry])


def test_the_check_compares_a_plugins_path_and_hash_and_imports_nothing(ledger_copy):
    for run in (NAMED_RUN, KEYED_RUN):
        name_plugins(ledger_copy / run, provenance=True, reseal=True)
    lines = verify(ledger_copy)
    assert not (ledger_copy.parent / "MARKER").exists() and "marker_mod" not in sys.modules
    assert lines == []  # whole: the paths agree, the edits sealed; the keyed run is not re-keyed


def test_a_plugin_its_provenance_does_not_record_is_a_problem_and_imports_nothing(ledger_copy):
    name_plugins(ledger_copy / NAMED_RUN, provenance=False, reseal=True)
    name_plugins(ledger_copy / KEYED_RUN, provenance=True, reseal=False)
    provenance = ledger_copy / KEYED_RUN / "provenance.json"
    record = json.loads(provenance.read_text())
    record["plugins"]["method.name"]["spec"] = "marker_mod:Other"
    provenance.write_text(json.dumps(record))
    lines = verify(ledger_copy)
    assert not (ledger_copy.parent / "MARKER").exists() and "marker_mod" not in sys.modules
    named = [line for line in lines if NAMED_RUN in line]
    keyed = [line for line in lines if KEYED_RUN in line]
    assert any("provenance.json: records no plug-ins by config key" in line for line in named), named
    assert any("'marker_mod:Other' for method.name" in line for line in keyed), keyed
    assert any("config.json: differs from the file the entry was added with" in line for line in keyed), keyed


def test_a_plugin_by_an_installed_entry_point_name_is_not_imported_either(ledger_copy, monkeypatch):
    registered = {"shufflefl.methods": {"marked": frozenset({"marker_mod:M"})}}
    monkeypatch.setattr(plugins, "registered", lambda group: registered.get(group, {}))
    entry = ledger_copy / NAMED_RUN
    config = json.loads((entry / "config.json").read_text())
    config["method"] = {"name": "marked"}
    (entry / "config.json").write_text(json.dumps(config))
    lines = [line for line in verify(ledger_copy) if NAMED_RUN in line]
    assert not (ledger_copy.parent / "MARKER").exists() and "marker_mod" not in sys.modules
    assert any("not a valid run config" in line and "not imported" in line for line in lines)


@pytest.mark.parametrize("module", ["marker_mod", "this"])
def test_figures_check_on_a_ledger_naming_a_module_runs_none_of_it(ledger_copy, capsys, module):
    """The issue's case: a config naming the standard library's ``this`` (whose import prints the Zen of Python),
    and a user's module that lies where a plug-in of theirs would (importable, so no guard refuses it)."""
    name_plugins(ledger_copy / NAMED_RUN, provenance=False, reseal=False, module=module)
    report = ledger_copy.parent / "REPORT.md"
    shutil.copy2(ROOT / "results" / "REPORT.md", report)
    imported = module in sys.modules
    assert figures_main(["check", "--ledger", str(ledger_copy), "--report", str(report)]) == 1
    out, err = capsys.readouterr()
    assert not (ledger_copy.parent / "MARKER").exists() and (module in sys.modules) == imported
    assert "Beautiful is better than ugly" not in out + err
    assert "Traceback" not in out + err and f"{NAMED_RUN}/provenance.json: records no plug-ins" in out
