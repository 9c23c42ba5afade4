"""The folders figures makes for an artefact (the root where it makes it, the artefact's and its scale's) carry the
package's output mark (theory.cli.OWNER), so a command run from inside one takes the working directory off sys.path
and nothing planted there runs (issue #69, sweep 5 case 127); a folder of the user's given as the root stays
unmarked, and a mark already there (another tool's) stays."""

from pathlib import Path

from figures.artefacts import Artefact, Build, Built, Claim
from theory.cli import OWNER, folder_owner
from theory.datafolder import written_folder


def tiny(ctx: Build) -> Built:
    return Built(["a"], [[1]], Claim("held", "one"), [], {})


ARTEFACT = Artefact("tiny", "a tiny artefact", {"quick": "nothing"}, tiny)


def test_the_folders_figures_made_are_marked(tmp_path: Path):
    root = tmp_path / "made" / "R"
    ARTEFACT.make(ARTEFACT.context("quick", root))
    for folder in (tmp_path / "made", root, root / "tiny", root / "tiny" / "quick"):
        assert folder_owner(folder) == "figures", folder
        assert written_folder(str(folder / "numpy.py")) is not None


def test_a_users_root_stays_unmarked_and_another_mark_stays(tmp_path: Path):
    root = tmp_path / "mine"
    root.mkdir()
    (root / "tiny").mkdir()
    (root / "tiny" / OWNER).write_text("sims.quadratic\n")
    ARTEFACT.make(ARTEFACT.context("quick", root))
    assert not (root / OWNER).exists()
    assert folder_owner(root / "tiny") == "sims.quadratic"
    assert folder_owner(root / "tiny" / "quick") == "figures"
