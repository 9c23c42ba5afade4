"""``python -m fl.synthesis``: pack a generator cache's synthetic sets into archives of bounded size (``pack``) and
unpack them into another machine's cache (``unpack``), where runs with the same D_i reuse them without training a
generator (:mod:`fl.synthesis.pack`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from fl.synthesis.fedssyn import GENERATORS
from fl.synthesis.pack import DEFAULT_MAX_BYTES, pack, unpack
from theory.cli import ArgumentParser, guarded


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m fl.synthesis", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    packing = commands.add_parser("pack", help="the finished sets of CACHE_DIR into OUT_DIR/NAME[-k].tar")
    packing.add_argument("cache_dir", type=Path, help="a generator cache (method.cache_dir, e.g. results/synthetic)")
    packing.add_argument("out_dir", type=Path)
    packing.add_argument(
        "--name", default="synthetic_sets", help="archive name, a plain file name (default: synthetic_sets)"
    )
    limit = "largest archive, MiB (default 15: the device tool brings back files under 16)"
    packing.add_argument("--max-mib", type=float, default=DEFAULT_MAX_BYTES / 2**20, help=limit)
    packing.add_argument("--generator", choices=GENERATORS, help="only this generator's folders")
    packing.add_argument(
        "--overwrite", action="store_true",
        help="replace archives of that name in OUT_DIR that pack did not write from this cache (a user's own file)",
    )  # fmt: skip
    unpacking = commands.add_parser(
        "unpack", help="archives into a generator cache, checked first (names, SHA-256, sizes; no links followed)"
    )
    unpacking.add_argument("archives", type=Path, nargs="+")
    unpacking.add_argument("--cache-dir", type=Path, default=Path("results/synthetic"),
                           help="the cache runs read (method.cache_dir; default results/synthetic)")  # fmt: skip
    return parser


@guarded("fl.synthesis")
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "pack":
        if not 0 < args.max_mib < 2**20:  # nan and inf included
            build_parser().error("--max-mib must be > 0 and finite (MiB)")
        archives, notes = pack(
            args.cache_dir, args.out_dir, args.name, int(args.max_mib * 2**20), args.generator, args.overwrite
        )
        for note in notes:
            print(f"left out: {note}")
        for archive in archives:
            print(f"{archive}: {archive.stat().st_size} bytes")
        if not archives:
            print(f"nothing to pack in {args.cache_dir}")
    else:
        folders = unpack(args.archives, args.cache_dir)
        print(f"{len(folders)} generator folders unpacked into {args.cache_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
