"""``python -m fl.data``: where each dataset is found (``list``: a damaged copy is skipped and said), load one and
describe it (``info NAME``: MNIST / Fashion-MNIST files checked against their published md5), or download one with
checksum verification (``fetch NAME``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from fl.data.datasets import LAYOUTS, canonical_name, check_root, data_roots, load, survey
from fl.data.fetch import fetch
from theory.cli import ArgumentParser, guarded, positive_float


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m fl.data", description=__doc__.split("\n")[0])
    where = "searched first (then $SHUFFLEFL_DATA, ~/.cache/shufflefl, /usr/share/datasets)"
    parser.add_argument("--data-root", help=where)
    root = ArgumentParser(add_help=False)  # the flag is also accepted after the command
    root.add_argument("--data-root", default=argparse.SUPPRESS, help=where)
    commands = parser.add_subparsers(dest="command", parser_class=ArgumentParser)
    commands.add_parser("list", help="each dataset and the folder it would be read from", parents=[root])
    info = commands.add_parser("info", help="load a dataset and print its sizes and class counts", parents=[root])
    info.add_argument("name", help=", ".join(LAYOUTS))
    get = commands.add_parser("fetch", help="download, verify and unpack a dataset into the data root", parents=[root])
    get.add_argument("name", help=", ".join(LAYOUTS))
    get.add_argument("--timeout", type=positive_float, default=60.0, help="seconds per connection attempt (> 0)")
    return parser


@guarded("fl.data")
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "fetch":
        folder = fetch(args.name, args.data_root, args.timeout)
        print(f"{canonical_name(args.name)}: ready in {folder}")
    elif args.command == "info":
        print(load(args.name, args.data_root).describe())
    else:
        check_root(args.data_root)  # a named root (the flag, $SHUFFLEFL_DATA) that does not exist: one line
        print("roots searched, in order: " + ", ".join(str(r) for r in data_roots(args.data_root)))
        for name, layout in LAYOUTS.items():
            whole, damaged, _ = survey(name, args.data_root, checksums=True)  # what load would refuse is not found
            where = str(whole[0]) if whole else f"not found (python -m fl.data fetch {name})"
            skipped = f" [skipped, damaged: {'; '.join(damaged)}]" if damaged else ""
            print(f"  {name:10s} {layout.title}: {where}{skipped}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
