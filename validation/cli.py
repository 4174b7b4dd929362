"""The ``rfkit`` command line.

Exit status: 0 success; 1 a ``--fail-on`` condition was met; 2 bad usage (unknown claim, paper or tier,
an unwritable output folder); 3 the run itself failed (a check raised).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from rfkit.validation.cite import FORMATS as CITE_FORMATS
from rfkit.validation.claims import all_claims, get_claim, papers
from rfkit.validation.model import TIERS

EXIT_FAIL_ON, EXIT_USAGE, EXIT_RUN_FAILED = 1, 2, 3
#: The cell checkpoint every `rfkit validate` run writes in its output folder (read back by --resume).
CHECKPOINT = "cells.ckpt"


class UsageError(Exception):
    """A user mistake on the command line: printed as one line, exit status 2."""


def _claims_for(args) -> list:
    if args.claim:
        try:
            claims = [get_claim(cid) for cid in args.claim]
        except KeyError as exc:
            raise UsageError(exc.args[0]) from None
    else:
        claims = all_claims()
    if args.paper:
        if args.paper not in papers():
            raise UsageError(f"unknown paper {args.paper!r}; expected one of {papers()}")
        claims = [c for c in claims if c.paper == args.paper]
    return claims


def _cmd_list(args) -> int:
    if args.paper and args.paper not in papers():
        raise UsageError(f"unknown paper {args.paper!r}; expected one of {papers()}")
    for c in all_claims():
        if args.paper and c.paper != args.paper:
            continue
        print(c.id if args.ids else f"{c.id:48} {c.kind:12} {c.source}")
    return 0


def _cmd_show(args) -> int:
    try:
        claim = get_claim(args.id)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    if args.witness:
        return _show_witness(claim, Path(args.out))
    if args.json:
        from rfkit.validation.engine import coverage_table

        document = dict(claim.declaration(), coverage=coverage_table(claim))
        print(json.dumps(document, indent=2, default=str, ensure_ascii=False))
        return 0
    print(f"{claim.id}  ({claim.paper}, {claim.kind})")
    print(f"source:      {claim.source}")
    print(f"statement:   {claim.statement}")
    print(f"hypotheses:  {claim.hypotheses}")
    print(f"tolerance:   {claim.tolerance:g} {claim.units}")
    if claim.readings or len(claim.variants) > 1:
        for v in claim.variants:
            reading = (claim.readings or {}).get(v)
            role = claim.role(v)
            words = f"  — “{reading.words}”" if reading is not None and reading.words else ""
            print(f"reading:     {v} [{role}]  {claim.variant_notes.get(v, '')}{words}")
    for tier in TIERS:
        cells = sum(len(claim.cells(tier, v)) for v in claim.variants)
        search = claim.n_restarts(tier) * len(claim.variants)
        print(f"tier {tier:6} {cells} grid cells, {search} search restarts, {claim.n_replicates(tier)} replicates")
        for design in dict.fromkeys(claim.design(tier, v)[1] for v in claim.variants):
            if not design.startswith(("product", "no grid")):
                print(f"            {design}")
    if claim.domain is not None:
        from rfkit.validation.engine import coverage_table

        for name, a in claim.domain.items():
            print(f"domain:      {name} ∈ {a.describe()}  — “{a.words}”")
        for tier, readings in coverage_table(claim).items():
            for v, c in readings.items():
                state = "covered" if c["covered"] else "NOT covered"
                tag = f" [{v}{', narrowed' if c['narrowed'] else ''}]" if len(readings) > 1 or c["narrowed"] else ""
                print(f"coverage     {tier:6}{tag} {state}: {c['coverage']}")
    for other, how in claim.related.items():
        print(f"related:     {other}  {how}")
    if claim.roles:
        print(f"roles:       {', '.join(claim.roles)}")
    if claim.untestable:
        print(f"untestable:  {claim.untestable}")
    return 0


def _show_witness(claim, out: Path) -> int:
    from rfkit.validation.cells import run_cell, spec_from_witness

    path = out / "verdicts.json"
    if not path.exists():
        raise UsageError(f"{path} not found: run `rfkit validate --claim {claim.id} --out {out}` first")
    entry = next((c for c in json.loads(path.read_text())["claims"] if c["id"] == claim.id), None)
    if entry is None:
        raise UsageError(f"{claim.id} is not in {path}")
    witness = entry.get("witness")
    if not witness:
        print(f"{claim.id}: {entry['verdict']} — no witness (only refuted claims store one)")
        return 0
    return _report_rerun(f"{claim.id}: {entry['verdict']}", witness, run_cell(spec_from_witness(witness, claim)))


def _report_rerun(head: str, witness: dict, outcome) -> int:
    """Print a stored witness beside its re-evaluation (``rfkit show --witness``, ``rfkit audit --witness``)."""
    print(f"{head}; witness cell {json.dumps(witness['params'])} variant {witness['variant']} ({witness['kind']}), "
          f"seed {witness['seed']}, tier {witness['tier']}")
    if outcome.error:
        print(f"re-evaluation failed: {outcome.error}")
        return EXIT_RUN_FAILED
    ev = outcome.evidence
    for key in ("estimate", "prediction", "effect", "upper", "p_value", "statistic"):
        print(f"  {key:10} stored {witness[key]!s:>24}   re-evaluated {getattr(ev, key)!s:>24}")
    same = all(str(witness[k]) == str(getattr(ev, k)) or witness[k] == getattr(ev, k)
               for k in ("estimate", "statistic", "p_value"))
    print("  reproduced exactly" if same else "  differs from the stored witness")
    return 0


def _writable(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".rfkit-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"cannot write to output folder {out}: {exc.strerror or exc}") from None


def _check_backend(backend: str, device: str) -> None:
    """``--backend torch`` needs torch; ``--device cuda`` needs the torch backend and a CUDA device."""
    if backend == "numpy":
        if device != "cpu":
            raise UsageError(f"--device {device} needs --backend torch (the numpy backend runs on the CPU)")
        return
    try:
        import torch
    except ImportError:
        raise UsageError("--backend torch needs PyTorch: pip install 'rfkit[torch]'") from None
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available to torch (use --device cpu)")


def _cmd_validate(args) -> int:
    from rfkit.validation.engine import validate
    from rfkit.validation.report import text_table, write_reports
    from rfkit.validation.results import write_run, write_verdicts

    start = time.perf_counter()

    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    claims = _claims_for(args)
    if not claims:
        raise UsageError("no claims selected")
    out = Path(args.out)
    _writable(out)
    _check_backend(args.backend, args.device)
    from rfkit.validation.checkpoint import CheckpointMismatch

    try:
        workers = args.workers
        if workers is None and args.scheduler is None:
            workers = 1 if args.device == "cuda" else "auto"
        run = validate(claims, tier=args.tier, seed=args.seed, alpha=args.alpha, workers=workers,
                       scheduler=args.scheduler, backend=args.backend, device=args.device,
                       progress=False if args.quiet else None, checkpoint=out / CHECKPOINT, resume=args.resume)
    except CheckpointMismatch as exc:
        raise UsageError(str(exc)) from None
    write_run(run, out)
    write_reports(run, out, latex=args.latex, figures=not args.no_figures, progress=False if args.quiet else None)
    run.command_seconds = time.perf_counter() - start  # the whole command: cells, results, reports, figures
    write_verdicts(run, out)
    if args.resume:
        print(f"resumed {run.resumed} cell(s) from {out / CHECKPOINT}"
              + (f"; reran {run.stale} stored cell(s) whose claim code changed" if run.stale else ""), file=sys.stderr)
    if not args.quiet:
        print(text_table(run))
        print(f"\nwrote {out}/verdicts.json, {out}/report.md, {out}/report.html and {len(run.claims)} result(s) "
              f"in {out}/results/ ({run.seconds:.1f} s)")
    if run.failed:
        for c in run.claims:
            for o in c.outcomes:
                if o.error:
                    print(f"error in {c.claim.id}: {o.error}", file=sys.stderr)
                    break
        return EXIT_RUN_FAILED
    verdicts = {c.verdict for c in run.claims}
    if args.fail_on == "refuted" and "refuted" in verdicts:
        return EXIT_FAIL_ON
    if args.fail_on == "inconclusive" and verdicts & {"refuted", "inconclusive"}:
        return EXIT_FAIL_ON
    return 0


def _cmd_audit(args) -> int:
    from rfkit.validation.audit import LIBRARIES, audit, audit_table, format_audit_table, get_library

    if args.list or not args.library:
        if not args.list:
            raise UsageError("name a library (rfkit audit --list lists them)")
        for lib in LIBRARIES.values():
            print(f"{lib.name:28} {lib.status}")
            print(f"{'':28} {lib.summary}")
            for prop in lib.properties:
                print(f"{'':30}- {prop}")
            if lib.notes:
                print(f"{'':28} note: {lib.notes}")
        return 0
    try:
        lib = get_library(args.library)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    if not lib.installed:
        raise UsageError(f"{lib.name} is {lib.status}")
    if not lib.properties:
        raise UsageError(f"{lib.name}: no adapters yet ({lib.notes})")
    out = Path(args.out)
    if args.witness:
        return _audit_witness(lib, args.witness, out)
    from rfkit.validation.report import text_table, write_reports
    from rfkit.validation.results import write_run

    _writable(out)
    unknown = sorted(set(args.property or ()) - set(lib.properties))
    if unknown:
        raise UsageError(f"{lib.name} has no property {', '.join(unknown)}; its properties: "
                         f"{', '.join(lib.properties)}")
    run = audit(lib, args.tier, args.seed, properties=args.property, progress=False if args.quiet else None)
    write_run(run, out)
    write_reports(run, out, figures=False, progress=False)
    rows = audit_table(run)
    table = format_audit_table(rows, lib)
    (out / "audit.md").write_text(table + "\n")
    (out / "audit.json").write_text(json.dumps(dict(library=lib.name, module=lib.module, version=lib.version,
                                                    tier=args.tier, seed=args.seed, rows=rows), indent=2,
                                               ensure_ascii=False) + "\n")
    if not args.quiet:
        print(text_table(run))
        print()
        print(table)
        print(f"\nwrote {out}/audit.md, {out}/audit.json, {out}/verdicts.json and {out}/report.md "
              f"({run.seconds:.1f} s); re-run a witness: rfkit audit {lib.name} --witness ID --out {out}")
    return EXIT_RUN_FAILED if run.failed else 0


def _audit_witness(lib, claim_id: str, out: Path) -> int:
    """Re-evaluate the witness of ``claim_id`` stored in ``out/verdicts.json`` with the library's adapters."""
    from rfkit.validation.audit import rerun_witness

    path = out / "verdicts.json"
    if not path.exists():
        raise UsageError(f"{path} not found: run `rfkit audit {lib.name} --out {out}` first")
    entry = next((c for c in json.loads(path.read_text())["claims"] if c["id"] == claim_id), None)
    if entry is None:
        raise UsageError(f"{claim_id} is not in {path}")
    witness = entry.get("witness")
    if not witness:
        print(f"{claim_id}: {entry['verdict']} — no witness (only refuted claims store one)")
        return 0
    return _report_rerun(f"{claim_id} ({lib.name} {lib.version}): {entry['verdict']}", witness,
                         rerun_witness(lib, claim_id, witness))


def _cmd_plan(args) -> int:
    from rfkit.validation.plan import estimate, plan_table

    claims = _claims_for(args)
    if not claims:
        raise UsageError("no claims selected")
    if args.sample < 0 or not args.cap > 0:
        raise UsageError(f"--sample must be >= 0 and --cap > 0, got {args.sample} and {args.cap}")

    def progress(row):
        if args.sample and not args.json:
            print(f"  {row['id']}: {row['sampled']} cell(s) timed", file=sys.stderr, flush=True)

    for path in args.measured:
        if not Path(path).is_file():
            raise UsageError(f"--measured: no checkpoint file {path} (a run writes OUT/cells.ckpt)")
    try:
        rows = estimate(claims, tier=args.tier, seed=args.seed, sample=args.sample, cap=args.cap,
                        measured=args.measured, progress=progress)
    except ValueError as exc:  # a checkpoint of another tier or seed, or not a checkpoint
        raise UsageError(f"--measured: {exc}") from None
    print(json.dumps(rows, indent=1) if args.json else plan_table(rows))
    return 0


def _cmd_reproduce(args) -> int:
    from rfkit.validation.reproductions import all_reproductions, get_reproduction, parse_options

    if args.list or not args.id:
        for rep in all_reproductions():
            print(f"{rep.id:24} {rep.description}")
            for name, default in rep.options.items():
                print(f"    --option {name}={default!s:16} {rep.option_docs.get(name, '')}")
        return 0
    try:
        rep = get_reproduction(args.id)
        options = parse_options(rep, args.option or [])
    except (KeyError, ValueError) as exc:
        raise UsageError(exc.args[0]) from None
    out = Path(args.out)
    _writable(out)
    paths = rep.run(out, **options)
    for name, path in paths.items():
        print(f"{name:12} {path}")
    return 0


def _cmd_bench(args) -> int:
    from rfkit.validation import bench

    if args.memory and (args.device or args.peers_only):
        raise UsageError("--memory is its own sweep (numpy, this CPU): not with --device or --peers-only")
    if args.device:
        return _bench_device(args)
    dtypes = list(dict.fromkeys(args.dtype or bench.DTYPES))
    if not set(dtypes) <= set(bench.DTYPES):
        raise UsageError(f"--dtype must be among {', '.join(bench.DTYPES)}, got {' '.join(args.dtype)}")
    if args.memory:
        cases = bench.memory_cases(lengths=args.lengths or bench.MEMORY_LENGTHS, dtypes=dtypes)
    else:
        cases = bench.default_cases(quick=args.quick, lengths=args.lengths, dtypes=dtypes, peers_only=args.peers_only)
    rows = bench.run_cases(cases, quick=args.quick, progress=not args.json and sys.stderr.isatty())
    print(bench.to_json_lines(rows) if args.json else bench.format_table(rows))
    return 0


def _bench_device(args) -> int:
    try:
        import torch
    except ImportError as exc:
        raise UsageError("--device needs torch (pip install 'rfkit[torch]')") from exc
    from rfkit.validation import devicebench

    try:
        device = torch.device(args.device)
    except RuntimeError as exc:
        raise UsageError(f"--device: {exc}") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is visible to torch here")
    if args.dtype or args.peers_only:
        raise UsageError("--device runs the device peer rows in float32 (and bf16 SDPA): drop --dtype/--peers-only")
    cases = devicebench.device_cases(str(device), args.lengths or devicebench.DEVICE_LENGTHS)
    rows = devicebench.run_device_cases(cases, str(device), repeats=3 if args.quick else 10,
                                        progress=not args.json and sys.stderr.isatty())
    print("\n".join(json.dumps(r) for r in rows) if args.json else devicebench.device_table(rows))
    return 0


def _cmd_cite(args) -> int:
    from rfkit.validation.cite import NoStoredRun, citation, render

    out = args.source if args.source is not None else ("rfkit-out" if Path("rfkit-out").is_dir() else None)
    try:
        cite = citation(args.id, out, need_run=args.format != "bibtex")
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    except NoStoredRun as exc:
        raise UsageError(str(exc)) from None
    print(render(cite, args.format))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rfkit", description="Random-feature attention estimators and "
                                     "measured verdicts on the claims made about them.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list registered claims")
    p.add_argument("--paper", help="only this paper's claims")
    p.add_argument("--ids", action="store_true", help="print claim ids only, one per line")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("show", help="describe a claim, or re-evaluate its stored witness")
    p.add_argument("id", help="claim id")
    p.add_argument("--witness", action="store_true", help="re-run the witness stored in OUT/verdicts.json")
    p.add_argument("--out", default="rfkit-out", help="output folder of a previous validate run")
    p.add_argument("--json", action="store_true", help="print the declaration, its domain and its coverage at "
                                                       "each tier as JSON")
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("cite", help="a LaTeX sentence, BibTeX and the reproduction command for a stored verdict")
    p.add_argument("id", help="claim id")
    p.add_argument("--from", dest="source", metavar="OUT",
                   help="output folder of a previous validate run (default ./rfkit-out if it exists)")
    p.add_argument("--format", choices=CITE_FORMATS, default="latex",
                   help="latex (default): sentence, BibTeX, commands as comments; bibtex needs no run")
    p.set_defaults(func=_cmd_cite)

    p = sub.add_parser("validate", help="test claims and compute verdicts")
    p.add_argument("--paper", help="only this paper's claims")
    p.add_argument("--claim", nargs="+", action="extend", metavar="ID", help="only these claims (repeatable)")
    p.add_argument("--tier", choices=TIERS, default="quick", help="sweep size (default quick)")
    p.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    p.add_argument("--alpha", type=float, default=1e-3, help="family-wise level per claim (default 1e-3)")
    p.add_argument("--out", default="rfkit-out", help="output folder (default rfkit-out)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--workers", type=int,
                       help="run cells in N local worker processes (default: one per CPU this process may use, "
                            "in this process below 200 cells or with --device cuda; 1: in this process)")
    group.add_argument("--scheduler", metavar="ADDRESS", help="run cells on an existing dask scheduler")
    p.add_argument("--fail-on", choices=("refuted", "inconclusive"),
                   help="exit 1 if a claim is refuted (or refuted or inconclusive)")
    p.add_argument("--backend", choices=("numpy", "torch"), default="numpy",
                   help="execution backend of the estimators under test (default numpy; torch: rfkit.gpu)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="torch device for --backend torch (default cpu)")
    p.add_argument("--latex", action="store_true", help="also write OUT/verdicts.tex")
    p.add_argument("--no-figures", action="store_true", help="skip the per-claim figures")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no table")
    p.add_argument("--resume", action="store_true",
                   help=f"skip the cells already in OUT/{CHECKPOINT} (every run writes it as cells finish), from a "
                        "run with the same tier, seed, alpha, backend and code; a long run stopped midway goes on")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("audit", help="audit a third-party random-feature library (--list: the audited libraries)")
    p.add_argument("library", nargs="?", help="pip or import name, e.g. performer-pytorch, scikit-learn")
    p.add_argument("--list", action="store_true", help="list the audited libraries, installed or not, and their "
                                                       "properties")
    p.add_argument("--tier", choices=TIERS, default="smoke", help="sweep size (default smoke)")
    p.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    p.add_argument("--out", default="rfkit-audit", help="output folder (default rfkit-audit)")
    p.add_argument("--property", nargs="+", action="extend", metavar="ID",
                   help="only these of the library's properties (repeatable)")
    p.add_argument("--witness", metavar="ID", help="re-run the witness of property ID stored in OUT/verdicts.json "
                                                   "with the library's adapters")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no table")
    p.set_defaults(func=_cmd_audit)

    p = sub.add_parser("plan", help="cells per claim at a tier and, with --sample, its estimated time")
    p.add_argument("--paper", help="only this paper's claims")
    p.add_argument("--claim", nargs="+", action="extend", metavar="ID", help="only these claims (repeatable)")
    p.add_argument("--tier", choices=TIERS, default="full", help="tier to plan (default full)")
    p.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    p.add_argument("--sample", type=int, default=0, metavar="K",
                   help="time K grid points, each with all its readings (and up to 2 search restarts) per claim, "
                        "and extrapolate (default 0)")
    p.add_argument("--cap", type=float, default=60.0, metavar="S",
                   help="seconds of sampling per claim; a cell past it makes the estimate a lower bound")
    p.add_argument("--measured", nargs="+", default=[], metavar="CKPT",
                   help="checkpoints of runs of the tier (OUT/cells.ckpt): their cells count with their measured "
                        "CPU time and the rest of a claim is extrapolated from them")
    p.add_argument("--json", action="store_true", help="one JSON list of rows")
    p.set_defaults(func=_cmd_plan)

    p = sub.add_parser("reproduce", help="reproduce a paper's figure (PNG + netCDF)")
    p.add_argument("id", nargs="?", help="figure id, e.g. performer.fig2 (omit or --list to list them)")
    p.add_argument("--out", default="rfkit-out/reproductions", help="output folder")
    p.add_argument("--option", nargs="+", metavar="NAME=VALUE", help="override a documented default")
    p.add_argument("--list", action="store_true", help="list the reproductions and their options")
    p.set_defaults(func=_cmd_reproduce)

    p = sub.add_parser("bench", help="speed and memory against exact attention")
    p.add_argument("--quick", action="store_true", help="fewer repeats and sizes")
    p.add_argument("--json", action="store_true", help="one JSON object per row")
    p.add_argument("--lengths", type=int, nargs="+", metavar="L", help="sequence lengths instead of the defaults")
    p.add_argument("--dtype", nargs="+", metavar="DTYPE",
                   help="float32 and/or float64: the dtypes every row runs in (default both; users run float32)")
    p.add_argument("--peers-only", action="store_true",
                   help="only the side-by-side peer rows (rfkit numpy and torch, torch SDPA, performer-pytorch)")
    p.add_argument("--memory", action="store_true",
                   help="only the memory sweep: causal FAVOR+'s peak memory at L = 16,384, 65,536 and 262,144 "
                        "(--lengths replaces them)")
    p.add_argument("--device", metavar="DEV",
                   help="a torch device (cuda, cuda:1, cpu): FAVOR+ through rfkit's torch backend against "
                        "performer-pytorch and torch SDPA (f32, bf16) on it, lengths 4096 to 65536 by default")
    p.set_defaults(func=_cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    if hasattr(signal, "SIGPIPE") and argv is None:  # `rfkit ... | head` ends quietly
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"rfkit {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
