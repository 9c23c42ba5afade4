"""Synthetic sets made on one machine and reused on another (fl.synthesis.pack, ``python -m fl.synthesis``,
scripts/ddpm_sets.py), the whole path on the CPU with tiny DDPMs: the lease's producer trains every client's DDPM in
worker processes, ``pack`` writes archives under a size limit, ``unpack`` fills a fresh cache, and ``fl.run`` of the
same config then trains and samples no generator while a run on another D_i (another seed, another partition) is
refused the sets and trains its own; a set the pack lacks, a tampered archive, a renamed folder and a conflicting
file each stop with one line."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

import fl.synthesis.generators.ddpm as ddpm
from fl.config import load_config
from fl.data.formats import write_pickle_batch
from fl.experiment import missing_prepared
from fl.run import main as run_main
from fl.synthesis.__main__ import main as synthesis_main
from fl.synthesis.fedssyn import KEY_FILE, PACKED_FILE, cache_key

ROOT = Path(__file__).resolve().parents[3]
TINY_DDPM = "{ base_channels = 8, channel_mults = [1, 2], num_res_blocks = 1, timesteps = 10, batch_size = 16 }"


def fedssyn_args(root: Path, cache: Path, *extra: str) -> list[str]:
    """A Fedssyn run with tiny DDPMs on the tiny CIFAR-10 (3 clients, 6 images each, 1 round)."""
    settings = [
        "data.dataset='cifar10'", f"data.data_root='{root}'", "data.partition='iid'", "data.clients=3",
        "model.name='mlp'", "train.rounds=1", "train.device='cpu'", "train.estimate_every=0",
        "method.name='fedssyn'", "method.generator='ddpm'", "method.epochs=1", "method.rho=0.2",
        "method.n_tilde=6", "method.sample_steps=2", f"method.generator_config={TINY_DDPM}",
        f"method.cache_dir='{cache}'", *extra,
    ]  # fmt: skip
    return [arg for setting in settings for arg in ("--set", setting)]


def sets_in(cache: Path) -> dict[str, bytes]:
    return {f"{p.parent.name}/{p.name}": p.read_bytes() for p in sorted(cache.glob("client*/synthetic-*.npz"))}


@pytest.fixture(scope="module")
def lease(tmp_path_factory):
    """The lease's side, once for the module: scripts/ddpm_sets.py (two worker processes) trains and samples the 3
    DDPMs of seed 0 on a tiny CIFAR-10 (as tests/conftest.py's ``cifar_root``: 5 x 40 images whose mean depends on
    the label)."""
    base = tmp_path_factory.mktemp("lease")
    folder = base / "data" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, n in [(f"data_batch_{i}", 40) for i in range(1, 6)] + [("test_batch", 30)]:
        labels = rng.integers(0, 10, n)
        data = np.clip(rng.normal(100 + 12 * labels[:, None], 30, (n, 3072)), 0, 255).astype(np.uint8)
        write_pickle_batch(folder / name, {"data": data, "labels": labels.tolist()})
    cache = base / "synthetic"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "ddpm_sets.py"), *fedssyn_args(base / "data", cache), "--workers", "2"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "3 generators of seed 0 ready" in done.stdout and done.stdout.count(": trained") == 3
    return base / "data", cache


@pytest.fixture()
def produced(lease, tmp_path):
    """The data root and a copy of the lease's cache (a test may change its copy)."""
    root, cache = lease
    shutil.copytree(cache, tmp_path / "lease" / "synthetic")
    return root, tmp_path / "lease" / "synthetic"


def no_generator(monkeypatch) -> None:
    """Any DDPM training or sampling from here on fails the test."""

    def trained(*args, **kwargs):
        raise AssertionError("a generator was trained or sampled")

    monkeypatch.setattr(ddpm.DDPM, "fit", trained)
    monkeypatch.setattr(ddpm.DDPM, "sample", trained)


def test_packed_sets_are_reused_without_training_and_refused_for_another_d_i(produced, tmp_path, monkeypatch, capsys):
    root, lease_cache = produced
    out, cpu_cache = tmp_path / "out", tmp_path / "cpu" / "synthetic"
    # a limit of 40 kB puts each client's folder (6 noisy images of 3x32x32 and two JSON files, ~21 kB) into an
    # archive of its own
    assert synthesis_main(["pack", str(lease_cache), str(out), "--name", "ddpm_sets", "--max-mib", "0.04"]) == 0
    parts = sorted(out.glob("ddpm_sets*.tar"))
    assert [p.name for p in parts] == ["ddpm_sets-1.tar", "ddpm_sets-2.tar", "ddpm_sets-3.tar"]
    assert all(p.stat().st_size <= 0.04 * 2**20 for p in parts)
    with tarfile.open(parts[0]) as archive:
        names = archive.getnames()
    assert names[0] == "manifest.json" and not any(n.endswith(".pt") for n in names)  # no weights travel
    assert sorted(n.split("/")[1] for n in names[1:])[:2] == ["generator.json", KEY_FILE]
    assert synthesis_main(["pack", str(lease_cache), str(out), "--name", "ddpm_sets"]) == 0  # repacked whole
    assert [p.name for p in out.glob("ddpm_sets*.tar")] == ["ddpm_sets.tar"]  # the three parts replaced

    assert synthesis_main(["unpack", str(out / "ddpm_sets.tar"), "--cache-dir", str(cpu_cache)]) == 0
    assert sets_in(cpu_cache) == sets_in(lease_cache) and len(sets_in(cpu_cache)) == 3
    assert all((f / PACKED_FILE).exists() and not list(f.glob("*.pt")) for f in cpu_cache.iterdir())
    assert synthesis_main(["unpack", str(out / "ddpm_sets.tar"), "--cache-dir", str(cpu_cache)]) == 0  # idempotent

    no_generator(monkeypatch)
    run = tmp_path / "runs" / "reuse"
    assert run_main([*fedssyn_args(root, cpu_cache), "--out", str(run), "--quiet"]) == 0
    synthetic = json.loads((run / "summary.json").read_text())["synthetic"]
    assert [s["cached"] for s in synthetic] == [True, True, True]
    lease = [json.loads(p.read_text()) for p in sorted(lease_cache.glob("client*/generator.json"))]
    assert [s["seconds_train"] for s in synthetic] == [g["seconds_train"] for g in lease]  # the lease's metadata

    # another D_i: the same cache holds nothing for it, so the run would train (and the stand-in refuses)
    for other in ("train.seed=1", "data.partition='dirichlet'"):
        with pytest.raises(AssertionError, match="a generator was trained"):
            run_main([*fedssyn_args(root, cpu_cache, other), "--out", str(tmp_path / "runs" / "other"), "--quiet"])
    assert sets_in(cpu_cache) == sets_in(lease_cache)

    # the same D_i but a set the pack lacks (another ñ): one line, no weights to sample from
    capsys.readouterr()
    assert run_main([*fedssyn_args(root, cpu_cache, "method.n_tilde=4"), "--out", str(tmp_path / "x"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unpacked (python -m fl.synthesis unpack) without its weights" in err
    assert "n_tilde=6" in err and "n_tilde=4" in err


def test_missing_prepared_names_the_clients_whose_sets_are_not_cached(produced):
    """What ``python -m figures`` asks before it runs an arm whose sets come from a lease: the clients a run would
    train a generator for (another seed or ñ: all of them; a set deleted: that client; no generator: none)."""
    root, cache = produced

    def config(*extra: str):
        return load_config(None, fedssyn_args(root, cache, *extra)[1::2])

    assert missing_prepared(config()) == []
    assert missing_prepared(config("train.seed=1")) == missing_prepared(config("method.n_tilde=4")) == [0, 1, 2]
    (one,) = list(cache.glob("client1-*/synthetic-*.npz"))
    one.unlink()
    assert missing_prepared(config()) == [1]
    assert missing_prepared(config("method.name='none'")) == []


def rewrite(archive: Path, change) -> Path:
    """A copy of ``archive`` with ``change(members)`` applied to {name: bytes}."""
    with tarfile.open(archive) as source:
        members = {m.name: source.extractfile(m).read() for m in source.getmembers()}
    change(members)
    copy = archive.with_name("changed.tar")
    with tarfile.open(copy, "w") as target:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            target.addfile(info, io.BytesIO(payload))
    return copy


def test_tampered_or_conflicting_packs_are_refused_before_anything_is_written(produced, tmp_path, capsys):
    _, lease_cache = produced
    out, cpu_cache = tmp_path / "out", tmp_path / "cpu"
    assert synthesis_main(["pack", str(lease_cache), str(out)]) == 0
    archive = out / "synthetic_sets.tar"
    manifest = json.loads(tarfile.open(archive).extractfile("manifest.json").read())
    first = sorted(manifest["folders"])[0]

    def another_d_i(members):  # the recorded key of client 0 now claims other indices: its name no longer matches
        manifest["folders"][first]["keys"]["generator"]["index"] = "0" * 64
        members["manifest.json"] = json.dumps(manifest).encode()

    def another_file(members):
        name = next(n for n in members if n.startswith(first) and n.endswith(".npz"))
        members[name] = members[name][:-1] + bytes([members[name][-1] ^ 1])

    for change, message in ((another_d_i, "does not match its recorded key"), (another_file, "SHA-256 differs")):
        capsys.readouterr()
        assert synthesis_main(["unpack", str(rewrite(archive, change)), "--cache-dir", str(cpu_cache)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("python -m fl.synthesis: error:") and err.count("\n") == 1 and message in err
        assert not cpu_cache.exists()

    # a file already in the cache that differs from the pack's: refused, the cache unchanged
    assert synthesis_main(["unpack", str(archive), "--cache-dir", str(cpu_cache)]) == 0
    meta = next(cpu_cache.glob(f"{first}/synthetic-*.json"))
    meta.write_text('{"changed": true}')
    before = sets_in(cpu_cache)
    assert synthesis_main(["unpack", str(archive), "--cache-dir", str(cpu_cache)]) == 2
    assert "already in the cache and different" in capsys.readouterr().err
    assert sets_in(cpu_cache) == before and meta.read_text() == '{"changed": true}'


def test_pack_leaves_out_unfinished_and_renamed_folders(produced, tmp_path, capsys):
    _, cache = produced
    folders = sorted(p for p in cache.iterdir() if p.is_dir())
    renamed = folders[0].with_name(folders[0].name[:-1] + ("0" if folders[0].name[-1] != "0" else "1"))
    folders[0].rename(renamed)
    (folders[1] / "generator.json").unlink()
    assert synthesis_main(["pack", str(cache), str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert f"left out: {renamed.name}: the folder's name does not match its recorded key" in printed
    assert f"left out: {folders[1].name}: not finished" in printed
    with tarfile.open(tmp_path / "out" / "synthetic_sets.tar") as archive:
        assert {n.split("/")[0] for n in archive.getnames()[1:]} == {folders[2].name}
    assert synthesis_main(["pack", str(tmp_path / "nothing"), str(tmp_path / "out")]) == 2


def test_a_recorded_key_hashes_to_its_folder_name_after_a_json_round_trip():
    """key.json holds the key as JSON (tuples become lists, numpy integers plain ones): its hash is unchanged."""
    key = {"dataset": "fmnist", "index": "ab", "seed": np.int64(3), "client": 2,
           "config": {"generator": "ddpm", "generator_config": {"channel_mults": (1, 2)}}}  # fmt: skip
    assert cache_key(json.loads(json.dumps(key, default=str))) == cache_key(key)
