"""Fifth sweep, cases 100, 122, 123 (an --out folder the user made, holding files of the names a tool writes: with
--overwrite sims.quadratic, sims.mnist and fl.sweep replaced them), 121 (a benchmark's --out naming the user's own
JSON file) and 135, 117 (curves written into another tool's output folder). The rule: no tool replaces a file it did
not write. theory.cli.make_dir takes a folder as a tool's only where the tool marked it (or recognises its output of
before marks); --overwrite writes into another folder only beside its files, never over one of a name the tool
writes, nor into another tool's marked folder, and it is never offered for a folder the tool did not make. Every
benchmark that writes an --out JSON refuses a file it did not write (theory.cli.json_out_problem). A --tensorboard or
--mlflow folder that a tool marked as its output (other than the run's own folder) is refused in one line. Nothing
here trains a model: every refusal comes before any work."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fl.run import main as run_main
from fl.runfolder import RUN_NAMES
from fl.sinks import refuse_tools_folder, refuse_tools_folders
from fl.sweep import run_state, sweep_folder
from sims.mnist.__main__ import main as mnist_main
from sims.quadratic.__main__ import OUTPUTS as QUADRATIC_OUTPUTS
from sims.quadratic.__main__ import main as quadratic_main
from tests.benchmarks.test_bench_bad_inputs import load_bench
from tests.fl.test_run import base_args
from theory.cli import OWNER, first_names, json_out_problem, make_dir
from theory.errors import InputError


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def users_folder(path: Path, *names: str) -> Path:
    """A folder the user made (no tool's mark), holding ``names``, each with the text "user NAME"."""
    path.mkdir()
    for name in names:
        (path / name).write_text(f"user {name}")
    return path


def one_line(err: str, *fragments: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, err
    return err


# ------------------------------------------------------------------------ theory.cli.make_dir


def test_overwrite_never_takes_a_users_folder_holding_a_name_the_tool_writes(tmp_path):
    out = users_folder(tmp_path / "proj", "summary.json", "notes.txt")
    before = snapshot(out)
    for overwrite in (False, True):
        with pytest.raises(InputError) as refused:
            make_dir(out, tool="sims.quadratic", overwrite=overwrite, writes=QUADRATIC_OUTPUTS)
        said = str(refused.value)
        assert "not made by sims.quadratic" in said and "summary.json" in said and "another --out" in said
        assert "use --overwrite" not in said
    assert snapshot(out) == before and not (out / OWNER).exists()


def test_overwrite_writes_beside_a_users_files_of_other_names_and_is_not_offered(tmp_path):
    out = users_folder(tmp_path / "proj", "notes.txt")
    with pytest.raises(InputError) as refused:
        make_dir(out, tool="sims.quadratic", writes=QUADRATIC_OUTPUTS)
    assert "not made by sims.quadratic" in str(refused.value) and "--overwrite" not in str(refused.value)
    make_dir(out, tool="sims.quadratic", overwrite=True, writes=QUADRATIC_OUTPUTS)
    assert (out / OWNER).read_text() == "sims.quadratic\n" and (out / "notes.txt").read_text() == "user notes.txt"
    make_dir(out, tool="sims.quadratic", writes=QUADRATIC_OUTPUTS)  # now its own: taken without --overwrite


def test_another_tools_folder_is_refused_even_with_overwrite_its_mark_kept(tmp_path):
    out = users_folder(tmp_path / "q", "notes.txt")
    (out / OWNER).write_text("sims.mnist\n")
    for overwrite in (False, True):
        with pytest.raises(InputError, match=re.escape("output folder of sims.mnist, not one sims.quadratic made")):
            make_dir(out, tool="sims.quadratic", overwrite=overwrite, writes=QUADRATIC_OUTPUTS)
    assert (out / OWNER).read_text() == "sims.mnist\n"


def test_a_tool_that_does_not_say_what_it_writes_takes_no_users_folder(tmp_path):
    out = users_folder(tmp_path / "proj", "anything.txt")
    with pytest.raises(InputError, match=re.escape("which figures.precision would replace")):
        make_dir(out, tool="figures.precision", overwrite=True)  # writes=None: any name may be one of its own
    assert not (out / OWNER).exists()


def test_output_of_before_marks_is_the_tools_own(tmp_path):
    out = users_folder(tmp_path / "old", "summary.json")
    make_dir(out, tool="sims.quadratic", writes=QUADRATIC_OUTPUTS, earlier=True)
    assert (out / OWNER).read_text() == "sims.quadratic\n"


def test_an_odd_mark_or_odd_names_stay_one_line(tmp_path):
    out = users_folder(tmp_path / "odd", "notes.txt")
    (out / OWNER).write_text("a\nb\n")
    with pytest.raises(InputError) as refused:
        make_dir(out, tool="fl.sweep", overwrite=True, writes=("table.csv",))
    assert "\n" not in str(refused.value) and "another tool" in str(refused.value)
    assert first_names(["a\nb", "c", "d", "e", "f"]) == "'a\\nb', c, d and 2 more"


def test_the_run_folder_names_are_every_file_a_run_writes():
    for name in ("summary.json", "checkpoint_round4.pt", "metrics.jsonl", "checkpoint.pt.0123456789abcdef.tmp"):
        assert name in RUN_NAMES
    for name in ("notes.txt", "summary.json.bak", 7):
        assert name not in RUN_NAMES


# ----------------------------------------------------------------------------- the tools' CLIs


@pytest.mark.parametrize(
    ("main", "names"),
    [
        (quadratic_main, ("summary.json", "table.csv", "fig2.png", "fig2.pdf", "rounds.csv", "notes.txt")),
        (mnist_main, ("summary.json", "table.csv", "estimates.csv", "curves.csv", "fig_b2.png", "notes.txt")),
    ],
    ids=["sims.quadratic", "sims.mnist"],
)
def test_a_simulator_with_overwrite_keeps_a_users_files_of_its_names(main, names, tmp_path, capsys):
    """Cases 100 and 122: refused in one line, with and without --overwrite; nothing of the user's replaced."""
    out = users_folder(tmp_path / "proj", *names)
    before = snapshot(out)
    for extra in ([], ["--overwrite"]):
        assert main(["--quick", "--quiet", "--no-plot", "--out", str(out), *extra]) == 2
        err = one_line(capsys.readouterr().err, "was not made by", "another --out")
        assert "use --overwrite" not in err
    assert snapshot(out) == before and not (out / OWNER).exists()


def test_quadratic_with_overwrite_writes_beside_a_users_notes(tmp_path, capsys):
    out = users_folder(tmp_path / "proj", "notes.txt")
    assert quadratic_main(["--quick", "--quiet", "--no-plot", "--out", str(out)]) == 2
    assert "--overwrite" not in one_line(capsys.readouterr().err, "not made by sims.quadratic")
    assert quadratic_main(["--quick", "--quiet", "--no-plot", "--out", str(out), "--overwrite"]) == 0
    assert (out / "notes.txt").read_text() == "user notes.txt" and (out / "summary.json").is_file()


def test_sweep_folder_and_its_run_folders_keep_a_users_files_of_their_names(tmp_path):
    """Case 123: fl.sweep --overwrite into a folder it did not make (and a run folder in it fl.run did not make)."""
    out = users_folder(tmp_path / "proj", "table.csv", "sweep.png", "sweep.json", "notes.txt")
    before = snapshot(out)
    with pytest.raises(InputError, match=re.escape("which fl.sweep would replace")):
        sweep_folder(out, overwrite=True)
    run = users_folder(tmp_path / "run", "summary.json")
    with pytest.raises(InputError, match=re.escape("which fl.run would replace")):
        run_state(None, run, overwrite=True)  # no config.json there: the config is not read
    assert snapshot(out) == before and snapshot(run) == {"summary.json": b"user summary.json"}


# ----------------------------------------------------------------------------- curves folders


def quadratic_folder(tmp_path: Path) -> Path:
    """sims.quadratic's own output folder (its mark), as case 135 makes it."""
    folder = users_folder(tmp_path / "q", "summary.json")
    (folder / OWNER).write_text("sims.quadratic\n")
    return folder


@pytest.mark.parametrize("flag", ["--tensorboard", "--mlflow"])
def test_a_run_refuses_curves_into_another_tools_folder_before_anything(flag, cifar_root, tmp_path, capsys):
    """Cases 135 and 117: nothing written into the simulator's folder, and no run folder made."""
    q, out = quadratic_folder(tmp_path), tmp_path / "r"
    before = snapshot(q)
    capsys.readouterr()
    assert run_main(base_args(cifar_root, out, flag, str(q))) == 2
    one_line(capsys.readouterr().err, f"{flag} {q}", "output folder of sims.quadratic")
    assert snapshot(q) == before and not out.exists()


def test_a_curves_folder_that_is_another_runs_folder_is_refused(tmp_path):
    other, mine = tmp_path / "a", tmp_path / "b"
    users_folder(other, "metrics.jsonl")
    (other / OWNER).write_text("fl.run\n")
    with pytest.raises(InputError, match=re.escape("output folder of fl.run")):
        refuse_tools_folders(mine, other, None)
    refuse_tools_folder(other, "--tensorboard", str(other.resolve()))  # the run's own folder: its own curves
    refuse_tools_folders(mine, tmp_path / "tb", tmp_path / "mlruns")  # new folders: nothing to refuse


def test_the_sinks_refuse_another_tools_folder_themselves(tmp_path):
    """The sinks' own check (fl.fleet's entries and fl.sweep's runs open them too): TensorBoard's claim and the
    MLflow store (checked before MLflow is imported), before either writes a file."""
    from fl.sinks import MLflow, claim

    q = quadratic_folder(tmp_path)
    before = snapshot(q)
    with pytest.raises(InputError, match="--tensorboard"):
        claim(q, str(tmp_path / "r"), unmarked_ok=True)
    with pytest.raises(InputError, match="--mlflow"):
        MLflow(q, [], owner=str(tmp_path / "r"))
    assert snapshot(q) == before


# ------------------------------------------------------------------------------------ benchmarks

BENCHES = {  # bench: its arguments before --out (small sizes, should a check come late)
    "sweep_jobs_bench": ["--jobs", "1", "--seeds", "0", "--rounds", "1"],
    "fleet_bench": ["--seeds", "0", "--rounds", "1", "--only", "1"],
    "clients_bench": ["--quick", "--devices", "cpu"],
    "ddpm_steps": [],
    "synthesis_bench": ["--quick", "--device", "cpu"],
    "gpu_bench": ["--dry", "--parts", "peak"],
}


@pytest.mark.parametrize("name", sorted(BENCHES))
def test_every_bench_refuses_a_users_json_at_out_and_keeps_it(name, tmp_path, capsys):
    """Case 121: refused in one line before any work; the user's file left as it is."""
    bench = load_bench(name)
    mine = tmp_path / "mine.json"
    mine.write_text('{"mine": "user data"}')
    with pytest.raises(SystemExit) as stop:
        bench.main([*BENCHES[name], "--out", str(mine)])
    assert stop.value.code == 2
    one_line(capsys.readouterr().err, "did not write")
    assert mine.read_text() == '{"mine": "user data"}'


@pytest.mark.parametrize("name", sorted(BENCHES))
def test_every_bench_replaces_its_own_earlier_json(name, tmp_path):
    bench = load_bench(name)
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({key: None for key in bench.OWN_KEYS}))
    assert json_out_problem(earlier, "x.json", bench.OWN_KEYS, name) is None
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "elsewhere.json")
    assert json_out_problem(link, "x.json", bench.OWN_KEYS, name) is None  # replaced by the rename, not followed
    assert "a folder" in json_out_problem(tmp_path, "x.json", bench.OWN_KEYS, name)


@pytest.mark.parametrize("name", ["sweep_jobs_bench", "fleet_bench"])
def test_a_sweep_bench_writes_its_json_again_over_its_own(name, tmp_path, monkeypatch):
    """The keys that tell its own JSON are in what it writes: a second bench into the same --out replaces it (the
    sweeps it times stubbed: seconds and a table)."""
    bench = load_bench(name)
    monkeypatch.setattr(bench, "timed_sweep", lambda *args: (1.0, "the table"))
    out = tmp_path / "bench.json"
    for _ in range(2):
        assert bench.main([*BENCHES[name], "--out", str(out)]) == 0
        assert set(bench.OWN_KEYS) <= set(json.loads(out.read_text()))
