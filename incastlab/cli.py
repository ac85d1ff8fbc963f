"""The `incastlab` command: one argparse tree, one subcommand per job; the Makefile wraps them.

Every flag of the fabric, the controller and the experiment is made from its dataclass field
(runmodel.params), so a parameter cannot exist without its flag or the other way round, and a
flag's help shows the default that applies (for compare and straggler: the scenario file's).
Errors a user can cause end with one line on stderr and exit code 2; a failed strategy with 1;
Ctrl-C, SIGTERM and SIGHUP tear the fabric down and exit 130.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from incastlab.cliflags import (  # noqa: F401 - the tree's pieces, importable from here as before
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    PARAM_CLASSES,
    SCENARIO_DIR,
    Parser,
    UsageError,
    add_json_flag,
    add_param_flags,
    add_results_flags,
    add_run_flags,
    config_from_args,
    fabric_and_controller,
    given_params,
    one_line,
    require_root,
    run_name,
    say,
)
from runmodel.config import ControllerOptions, load_scenario
from runmodel.fabric import FabricSpec
from runmodel.params import ParamError


# -- subcommands ----------------------------------------------------------------------------------
def cmd_fabric(args: argparse.Namespace) -> int:
    """Bring the fabric up, check it, calibrate it, optionally hand over to Mininet's CLI."""
    from incastlab.session import fabric_session
    from runmodel.fabric import build_plan
    from topologies.calibrate import calibrate

    spec, options = fabric_and_controller(args)
    workdir = Path(args.workdir)
    with fabric_session(build_plan(spec), options, workdir, progress=say, cluster=True) as sess:
        say(f"dashboard and API: {sess.controller.base}/")
        if not args.no_calibrate:
            cal = calibrate(sess.fabric, seconds=args.seconds, controller=sess.controller, progress=say)
            print(cal.table(), flush=True)
            out = workdir / "calibration.json"
            out.write_text(json.dumps(cal.to_dict(), indent=1))
            say(f"calibration written to {out}")
        if args.cli:
            from mininet.cli import CLI

            CLI(sess.fabric.net)
        elif args.hold:
            say("fabric is up; Ctrl-C to take it down")
            while sess.controller.alive():
                time.sleep(0.5)
            raise UsageError(
                f"the controller died ({sess.controller.last_log_line() or 'no message'}); "
                "the fabric was taken down"
            )
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    """Bring the fabric up and keep it up with the dashboard served, until Ctrl-C."""
    args.no_calibrate, args.cli, args.hold, args.seconds = True, False, True, 2.0
    return cmd_fabric(args)


def cmd_clean(args: argparse.Namespace) -> int:
    """Remove everything an earlier (crashed) run left behind."""
    from incastlab.cleanup import clean_all, find_leftovers

    left = clean_all()
    after = find_leftovers()
    print(f"removed: {left.describe()}")
    if not after.empty():
        print(f"incastlab clean: could not remove {after.describe()}", file=sys.stderr)
        return 1
    return 0


def cmd_experiment(args: argparse.Namespace) -> int:
    """Run the strategies on one fabric; write the run folder, summary, report; print the table."""
    from incastlab.runner import ExperimentError, run_experiment
    from incastlab.session import run_session
    from runmodel.folder import RunFolder

    scenario = Path(args.scenario) if args.scenario else SCENARIO_DIR / f"{args.default_scenario}.json"
    base = load_scenario(scenario)
    if getattr(args, "job_command", None):  # `incastlab job ... -- CMD`
        base = dataclasses.replace(base, job_command=tuple(args.job_command))
    cfg = config_from_args(args, base)
    from incastlab.check import experiment_line, is_root

    if not args.check:
        require_root()  # before the kernel is asked and before a run folder exists
    root = is_root()  # --check without root: what only root can ask the kernel is left out
    from topologies.hosttcp import check_cc, check_rto_min

    for spec in cfg.strategy_specs if root else []:  # what the kernel cannot do, refused before anything
        check_cc(spec.cc or cfg.cc)
        check_rto_min(spec.rto_min_ms)
    if args.check:  # the machine's state (ports, disk, docker) is the run's to check, not the input's
        print(experiment_line(cfg, scenario, root_checked=root), flush=True)
        return 0
    from incastlab.session import runtime_for

    hosts = runtime_for(cfg, Path(args.results), say)  # docker or netns, said in one line, refused early
    folder = RunFolder.create(Path(args.results), label=args.run_name or "")
    from incastlab.version import provenance

    made_by = {"scenario": str(scenario), "provenance": provenance(args.argv).to_dict()}
    folder.write_config(cfg, **made_by)
    say(f"run folder: {folder.path}")
    say(cfg.placement_line())
    error: str | None = None
    code = 0
    try:
        with run_session(cfg, folder, say, (cfg.cc, None), hosts.mounting(folder.path), cluster=True) as sess:
            env = dataclasses.asdict(sess.environment())
            folder.write_config(cfg, environment=env, **made_by)
            say(f"dashboard: {sess.controller.base}/")
            run_experiment(sess, cfg, folder, say)
    except ExperimentError as exc:
        error, code = str(exc), 1
    except KeyboardInterrupt:
        error, code = "interrupted", EXIT_INTERRUPTED
    finally:
        try:
            finish(folder.path, error, as_json=getattr(args, "json", False))
        except KeyboardInterrupt:
            error, code = "interrupted while writing the summary and report", EXIT_INTERRUPTED
    if error:
        where = folder.path
        hint = f" (rebuild the report with `incastlab report {where}`)" if code == EXIT_INTERRUPTED else ""
        print(f"incastlab {args.command}: {error}; results so far are in {where}{hint}", file=sys.stderr)
    return code


def finish(run_dir: Path, error: str | None, as_json: bool = False) -> None:
    """Summary, table and report of whatever the run produced (also after a failure); with as_json
    the table is printed as JSON and stdout holds nothing else."""
    from analysis.summary import summarize
    from report.console import comparison, table_text

    try:
        say("summary: computing figures")
        summary = summarize(run_dir)
        print(table_text(comparison(summary), run_dir, as_json), flush=True)
    except Exception as exc:  # noqa: BLE001 - the run's files stay; the report can be rebuilt
        say(f"summary failed: {type(exc).__name__}: {exc} (rebuild with `incastlab report {run_dir}`)")
        return
    try:
        from report import build_report

        say("report: building")
        built = build_report(run_dir)
        (say if as_json else print)(f"report: {built['files']['html']}")
    except Exception as exc:  # noqa: BLE001
        say(f"report failed: {type(exc).__name__}: {exc} (rebuild with `incastlab report {run_dir}`)")


def cmd_report(args: argparse.Namespace) -> int:
    """Rebuild report.html/.md and figures of a saved run, a compare-like run or an incast sweep (the
    kind its config.json says), into the run folder or --out DIR; the summary (incast.json) is rebuilt
    when missing. With --json print the run's table as JSON instead of the report's path."""
    run_dir = Path(args.run)
    out = Path(args.out) if args.out else None
    if out is None and run_dir.is_dir() and not os.access(run_dir, os.W_OK):
        raise UsageError(f"cannot write the report into {run_dir} (not writable here); give --out DIR")
    from report.console import table_text

    try:
        table, html = report_of(run_dir, out)
    except OSError as exc:  # a summary to rebuild in a read-only run folder, a full disk, an --out not ours
        where = Path(exc.filename or out or run_dir)
        inside = where.resolve().is_relative_to(run_dir.resolve())
        hint = "; its summary is rebuilt in the run folder: report from a writable copy" if inside else ""
        raise UsageError(f"cannot write {where}: {exc.strerror or exc}{hint}") from exc
    if not getattr(args, "json", False):
        print(html)
        return 0
    say(f"report: {html}")
    print(table_text(table, run_dir, True))
    return 0


def report_of(run_dir: Path, out: Path | None) -> tuple[Any, Path]:
    """Build the report of a run folder by what it holds: an incast sweep's (config.json's kind, its
    incast.json analysed from the captures when missing) or a run's; returns its table and report.html."""
    from report.console import comparison, incast
    from runmodel.folder import RunFolder

    doc = RunFolder(run_dir).config_doc() if run_dir.is_dir() else None
    if doc is not None and doc.get("kind") == "incast":
        from analysis.incast import analyze_sweep
        from report.incast import build_incast_report
        from runmodel.incast import IncastFolder

        result = IncastFolder(run_dir).result()
        if result is None:
            say("analysis: no readable incast.json; reading the captures and counters of every point")
            result = analyze_sweep(run_dir)
        files = build_incast_report(run_dir, out)
        return incast(result), files["html"]
    from report import build_report
    from runmodel.summary import RunSummary

    built = build_report(run_dir, out)
    summary = RunSummary.from_dict(RunFolder(Path(built["run_dir"])).summary_doc() or {})
    return comparison(summary), built["files"]["html"]


def cmd_incast(args: argparse.Namespace) -> int:
    """The incast curve: N servers answer one client at once, N swept, one curve per cure."""
    from incastlab.incast import finish, run
    from runmodel.incast import IncastConfig, load_incast_scenario

    if args.rebuild:
        return finish(Path(args.rebuild), say, as_json=args.json)
    if args.param_ps_host is not None:
        raise UsageError("--ps-host: the incast's receiver is --client")
    scenario = Path(args.scenario) if args.scenario else SCENARIO_DIR / "incast.json"
    base = load_incast_scenario(scenario)
    cfg = base.overridden(
        given_params(args, FabricSpec),
        given_params(args, ControllerOptions),
        given_params(args, IncastConfig),
    )
    cfg.validate()
    from incastlab.check import incast_line, is_root

    if args.check:
        root = is_root()
        from incastlab.incast import kernel_checks

        checked, not_run = kernel_checks(cfg, args.param_lines is not None) if root else (cfg, [])
        if not checked.curves:
            raise ParamError("lines: no curve this kernel can run")
        print(incast_line(checked, scenario, root, not_run), flush=True)
        return 0
    require_root()  # before the kernel is asked and before a run folder exists
    from incastlab.version import provenance

    return run(
        cfg,
        Path(args.results),
        lines_given=args.param_lines is not None,
        say=say,
        scenario=str(scenario),
        provenance=provenance(args.argv).to_dict(),
        name=args.run_name or "",
        as_json=args.json,
    )


def cmd_check(args: argparse.Namespace) -> int:
    """`incastlab check SCENARIO [FLAGS]`: the run command the scenario is for, with --check."""
    from incastlab.check import check_argv

    return _main(check_argv(args, SCENARIO_DIR))


def _stage(module: str, func: str) -> Callable[[argparse.Namespace], int]:
    """A subcommand a later stage implements, imported only when it runs."""

    def run(args: argparse.Namespace) -> int:
        import importlib

        return int(getattr(importlib.import_module(module), func)(args))

    return run


# -- the tree ---------------------------------------------------------------------------------------
class VersionAction(argparse.Action):
    """--version: the package version and the checkout's commit in one line (git runs only if asked)."""

    def __init__(self, option_strings: list[str], dest: str, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kw: Any) -> NoReturn:
        from incastlab.version import version_line

        print(version_line(), flush=True)
        raise SystemExit(0)


def add_scenario_parser(
    sub: Any, name: str, title: str, load: Callable[[Path], Any], text: str, about: str
) -> argparse.ArgumentParser:
    """The subcommand NAME that runs a scenario: `about`, then that scenarios/NAME.json gives its
    defaults and any flag overrides them; add_run_flags with the shipped scenario's values shown."""
    scenario = SCENARIO_DIR / f"{name}.json"
    p = sub.add_parser(
        name,
        help=text,
        description=f"{about} Defaults are those of {scenario.name}; any flag given overrides it.",
    )
    add_run_flags(p, title, load(scenario), scenario)
    return p


def build_parser() -> Parser:
    """The argument parser of every subcommand."""
    p = Parser(
        prog="incastlab",
        description=(
            "Why the network is the bottleneck of distributed training: "
            "PS vs ring all-reduce on an emulated leaf-spine fabric."
        ),
    )
    p.add_argument(
        "--version", action=VersionAction, help="print the version and the git commit of this checkout"
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)

    f = sub.add_parser("fabric", help="bring up the fabric + controller, check and calibrate it")
    add_param_flags(f, FabricSpec, "fabric")
    add_param_flags(f, ControllerOptions, "controller")
    f.add_argument("--cli", action="store_true", help="leave the user in Mininet's CLI")
    f.add_argument("--hold", action="store_true", help="keep the fabric up until Ctrl-C")
    f.add_argument("--no-calibrate", action="store_true", help="skip the link calibration")
    f.add_argument("--seconds", type=float, default=2.0, help="seconds per calibration flow (default: 2)")
    f.add_argument(
        "--workdir",
        default="results/fabric",
        help="where plan, logs and calibration go (default: results/fabric)",
    )
    f.set_defaults(func=cmd_fabric)

    d = sub.add_parser("dashboard", help="bring up the fabric and serve the live dashboard until Ctrl-C")
    add_param_flags(d, FabricSpec, "fabric")
    add_param_flags(d, ControllerOptions, "controller")
    d.add_argument(
        "--workdir", default="results/dashboard", help="where plan and logs go (default: results/dashboard)"
    )
    d.set_defaults(func=cmd_dashboard)

    for name, text in (
        ("compare", "the main job: PS vs ring all-reduce, report in results/latest"),
        ("straggler", "sync, async, SSP and backup workers with one straggler"),
        (
            "mitigate",
            "incast cures side by side: 1 ms minimum RTO, a PS sharded over 2 and 4 hosts, the ring",
        ),
    ):
        e = add_scenario_parser(sub, name, "experiment", load_scenario, text, f"{text}.")
        e.set_defaults(func=cmd_experiment, default_scenario=name)

    j = add_scenario_parser(
        sub,
        "job",
        "experiment",
        load_scenario,
        "your own PyTorch distributed training command, one container per worker host",
        "Runs CMD in one container of IMAGE per worker host, its "
        "network the host's on the fabric, with the environment torchrun gives (RANK, "
        "WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and GLOO_SOCKET_IFNAME; captured, "
        "sampled and reported like the built-in strategies, its steps read off its traffic.",
    )
    j.add_argument("job_command", nargs="*", metavar="-- CMD", help="the command each worker container runs")
    j.set_defaults(func=cmd_experiment, default_scenario="job")

    from runmodel.incast import load_incast_scenario

    n = add_scenario_parser(
        sub,
        "incast",
        "incast",
        load_incast_scenario,
        "the incast curve: goodput against the number of senders, and its cures",
        "The barrier-synchronised read of the incast papers on the "
        "fabric: one client asks N servers for a block each at once, R rounds, N swept, one "
        "curve per cure; --buffer is the client port's buffer.",
    )
    n.add_argument(
        "--rebuild",
        metavar="RUN",
        help="recompute incast.json and the report of a saved run "
        "folder from its files (no network, no root)",
    )
    n.set_defaults(func=cmd_incast)

    r = sub.add_parser("report", help="rebuild the report of a saved run folder (compare-like or incast)")
    r.add_argument("run", help="run folder, e.g. results/latest")
    r.add_argument(
        "--out",
        metavar="DIR",
        help="write report.html, report.md and figures/ into DIR instead of the run folder "
        "(for a run folder this user cannot write)",
    )
    add_json_flag(r)
    r.set_defaults(func=cmd_report)

    from incastlab.analyze import ANALYZE_HELP, INSPECT_HELP, add_analyze_arguments, add_inspect_arguments

    for name, what, description, add, run in (
        (
            "analyze",
            "count retransmissions, timeouts, dup ACKs... of pcap or pcapng captures",
            ANALYZE_HELP,
            add_analyze_arguments,
            "run_analyze",
        ),
        (
            "inspect",
            "list a capture's connections, or one flow's packets with what each is",
            INSPECT_HELP,
            add_inspect_arguments,
            "run_inspect",
        ),
    ):
        c = sub.add_parser(name, help=what, description=description)
        add(c)
        c.set_defaults(func=_stage("incastlab.analyze", run))

    k = sub.add_parser(
        "check",
        help="validate a scenario file and flags without root, building nothing",
        description="Checks SCENARIO (a file, or a shipped scenario's name: compare, straggler, "
        "mitigate, job, incast) and the FLAGS after it with the parsing of the command the scenario "
        "is for (incast for a sweep's fields, job for a job strategy, else compare): ok in one line, "
        "exit 0; else the run's own one-line message, exit 2. Same as that command's --check.",
    )
    k.add_argument("scenario", metavar="SCENARIO", help="scenario file or shipped scenario name")
    k.add_argument("flags", nargs=argparse.REMAINDER, metavar="FLAGS", help="the run command's flags")
    k.set_defaults(func=cmd_check)

    from incastlab.ecmp import add_ecmp_parser
    from incastlab.paths import add_paths_parser

    add_paths_parser(sub)
    add_ecmp_parser(sub)

    c = sub.add_parser("clean", help="remove bridges, veths, processes left by a crashed run")
    c.set_defaults(func=cmd_clean)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `incastlab` console script."""
    from incastlab.session import INTERRUPTS

    INTERRUPTS.install()  # before anything else: no moment of a run is without the handlers
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv else "incastlab"
    try:
        return _main(argv)
    except KeyboardInterrupt:
        done = "; the fabric was taken down" if builds_fabric(argv) else ""
        print(f"incastlab {command}: interrupted{done}", file=sys.stderr)
        return EXIT_INTERRUPTED


FABRIC_COMMANDS = (
    "fabric",
    "dashboard",
    "compare",
    "straggler",
    "mitigate",
    "job",
    "incast",
    "paths",
    "ecmp",
)


def builds_fabric(argv: list[str]) -> bool:
    """True for a command line that builds a fabric (so an interrupt took one down): a run command,
    not its --check, not incast --rebuild."""
    return bool(argv) and argv[0] in FABRIC_COMMANDS and not {"--check", "--rebuild"} & set(argv)


def _main(argv: list[str]) -> int:
    from analysis.errors import AnalysisError
    from controller.launch import ControllerError
    from incastlab.session import SessionError
    from topologies.containers import ContainerError
    from topologies.fabric import FabricError
    from topologies.hosttcp import HostTcpError
    from topologies.image import ImageError

    try:
        args = build_parser().parse_args(argv)
    except ParamError as exc:  # a shipped scenario that does not load
        print(one_line(f"incastlab: {exc}"), file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help, or a usage error already printed in one line
        return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USAGE
    args.argv = ["incastlab", *argv]  # the command line, for the run's provenance
    try:
        return int(args.func(args) or 0)
    except (
        ParamError,
        UsageError,
        SessionError,
        FabricError,
        ControllerError,
        HostTcpError,
        AnalysisError,
        ContainerError,
        ImageError,
    ) as exc:
        for line in getattr(exc, "lines", None) or [str(exc)]:  # a ServerError: a line per piece
            print(one_line(f"incastlab {args.command}: {line}"), file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
