"""The ``rfkit`` command line."""

from __future__ import annotations

import argparse
import signal
import sys

from rfkit.validation.claims import all_claims


def _cmd_list(args) -> int:
    claims = all_claims()
    if args.paper:
        claims = [c for c in claims if c.paper == args.paper]
    for c in claims:
        print(c.id if args.ids else f"{c.id:48} {c.kind:12} {c.source}")
    return 0


def _cmd_bench(args) -> int:
    from rfkit.validation import bench

    rows = bench.run_cases(bench.default_cases(quick=args.quick, lengths=args.lengths), quick=args.quick,
                           progress=not args.json and sys.stderr.isatty())
    print(bench.to_json_lines(rows) if args.json else bench.format_table(rows))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rfkit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list registered claims")
    p.add_argument("--paper", help="only this paper's claims")
    p.add_argument("--ids", action="store_true", help="print claim ids only, one per line")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("bench", help="speed and memory against exact attention")
    p.add_argument("--quick", action="store_true", help="fewer repeats and sizes")
    p.add_argument("--json", action="store_true", help="one JSON object per row")
    p.add_argument("--lengths", type=int, nargs="+", metavar="L",
                   help="sequence lengths to run instead of the defaults")
    p.set_defaults(func=_cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    if hasattr(signal, "SIGPIPE") and argv is None:  # `rfkit ... | head` ends quietly
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = build_parser().parse_args(argv)
    return args.func(args)
