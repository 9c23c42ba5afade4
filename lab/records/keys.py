"""The names the run records share: the ledger's mark and folders, the scales, what a run's records are, and the key
that names a run of the artefacts in a store or the ledger."""

from __future__ import annotations

from fl.config import RunConfig, from_dict, identity_hash

RUNS, SYNTHETIC = "_runs", "_synthetic"  # a store's keyed runs (run_key) and its generator cache
LEDGER_MARK = ".ledger"  # a store holding this file is a run ledger: read, never run in
SCALES = ("quick", "cpu", "paper")  # the artefacts' scales (figures.artefacts)
# a run's records, which come back for every run, finished or not, and what the ledger keeps of it
RECORD_FILES = (
    "config.json", "metrics.jsonl", "summary.json", "provenance.json", "init_from.txt", "estimates_posthoc.jsonl",
    "dynafed_synthesis.pt",
)  # fmt: skip


def run_key(config: RunConfig) -> str:
    """12 hex digits naming a run in a store or the ledger: the hash of what its config sets away from the defaults
    (of its algorithm and method), without ``method.cache_dir``. Where generators are cached changes no number, so
    the same run has one name in every store; and a key added to the code later with a default leaves the names
    of earlier runs, those in the ledger included, as they were."""
    tree = config.identity()
    tree["method"].pop("cache_dir", None)
    names = {"algorithm": {"name": config.algorithm["name"]}, "method": {"name": config.method["name"]}}
    defaults = from_dict(names, notes=[]).identity()  # its notes (a shadowed plug-in) are not the key's business
    changed = {
        section: {k: v for k, v in table.items() if k == "name" or defaults.get(section, {}).get(k, object()) != v}
        for section, table in tree.items()
    }
    return identity_hash(changed)
