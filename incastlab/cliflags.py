"""The command line's shared pieces: exit codes, progress, one-line errors, and the flags made from
the run model's dataclass fields (runmodel.params), for the `incastlab` tree (incastlab.cli) and the
subcommands a later module defines (incastlab.ecmp, incastlab.paths), which import them from here
rather than from the tree that imports them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from runmodel.config import ControllerOptions, ExperimentConfig
from runmodel.fabric import FabricSpec
from runmodel.params import Flag, ParamError, flags

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
SCENARIO_DIR = Path(__file__).with_name("scenarios")


class UsageError(RuntimeError):
    """A one-line error for the user."""


def say(msg: str) -> None:
    """Progress on stderr, so stdout stays for tables and JSON."""
    print(f"[incastlab {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def one_line(text: str) -> str:
    """`text` with every character a terminal or str.splitlines would break at (newlines, form feeds,
    U+2028...) and every other unprintable one written as its escape: a message quoting what the user
    typed (argparse quotes unknown arguments as given) stays one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line: `incastlab compare: error: ...`, exit 2."""

    def error(self, message: str) -> NoReturn:
        print(one_line(f"{self.prog}: error: {message}"), file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


# -- flags from the run model -----------------------------------------------------------------------
PARAM_CLASSES: tuple[type, ...] = (FabricSpec, ControllerOptions, ExperimentConfig)


def _dest(flag: Flag) -> str:
    return f"param_{flag.name}"


def add_param_flags(p: argparse.ArgumentParser, cls: type, title: str, defaults: Any = None) -> None:
    """One flag per field of `cls`; `defaults` (an instance) gives the values shown as defaults."""
    g = p.add_argument_group(title)
    for fl in flags(cls):
        shown = getattr(defaults, fl.name) if defaults is not None else fl.default
        if isinstance(shown, tuple):
            shown = ",".join(map(str, shown)) if shown else "none"
        default_text = "none" if shown is None or shown == "" else shown
        kw: dict[str, Any] = {
            "dest": _dest(fl),
            "default": None,
            "metavar": fl.metavar or fl.name.upper(),
            "help": f"{fl.help} (default: {default_text})".replace("%", "%%"),
        }
        if fl.choices:
            kw["choices"] = fl.choices
        if fl.repeat:
            kw["action"] = "append"
        g.add_argument(fl.flag, *fl.aliases, **kw)


def given_params(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The fields of `cls` whose flags were given, parsed (ParamError names the flag)."""
    out: dict[str, Any] = {}
    for fl in flags(cls):
        raw = getattr(args, _dest(fl), None)
        if raw is None:
            continue
        try:
            out[fl.name] = tuple(fl.parse(r) for r in raw) if fl.repeat else fl.parse(raw)
        except (ValueError, TypeError) as exc:
            if isinstance(exc, ParamError):
                raise
            raise ParamError(f"{fl.flag}: not a valid value: {raw!r}") from exc
    return out


def config_from_args(args: argparse.Namespace, base: ExperimentConfig) -> ExperimentConfig:
    """The scenario's config with every flag given on the command line put over it, validated."""
    cfg = base.overridden(
        given_params(args, FabricSpec),
        given_params(args, ControllerOptions),
        given_params(args, ExperimentConfig),
    )
    cfg.validate()
    return cfg


def fabric_and_controller(args: argparse.Namespace) -> tuple[FabricSpec, ControllerOptions]:
    """The fabric and controller flags of `fabric` and `dashboard`, over the defaults."""
    spec = FabricSpec(**given_params(args, FabricSpec))
    options = ControllerOptions(**given_params(args, ControllerOptions))
    options.validate()
    return spec, options


def require_root() -> None:
    """Refuse a run that cannot build the network (not root) in session.preflight's words, before it
    makes a run folder that would hold nothing but a report of nothing."""
    from incastlab.session import preflight

    if os.geteuid() != 0:
        preflight()


def run_name(text: str) -> str:
    """--name's argparse type: a bad name is refused in one line before anything is built."""
    from runmodel.folder import check_run_name

    try:
        return check_run_name(text)
    except ParamError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--name: ")) from exc


def add_json_flag(p: argparse.ArgumentParser) -> None:
    """--json: the end-of-run table as one JSON document on stdout (report.console's Table.to_doc,
    plus the run folder's path under `run`); progress stays on stderr."""
    p.add_argument(
        "--json",
        action="store_true",
        help="print the table as JSON on stdout (columns, rows, footer, run) instead of text",
    )


def add_run_flags(p: argparse.ArgumentParser, title: str, shown: Any, scenario: Path) -> None:
    """The flags of a command that runs a scenario: one per field of its config (`shown`, the shipped
    scenario, gives the defaults), of its fabric and controller, --scenario, --results, --name and
    --json."""
    add_param_flags(p, type(shown), title, shown)
    add_param_flags(p, FabricSpec, "fabric", shown.fabric)
    add_param_flags(p, ControllerOptions, "controller", shown.controller)
    p.add_argument("--scenario", help=f"scenario file (default: the shipped {scenario.name})")
    p.add_argument(
        "--check",
        action="store_true",
        help="validate the scenario and every flag, print one line and exit (no root needed, "
        "nothing built); exit 2 with the run's own message when something is wrong",
    )
    add_results_flags(p)
    add_json_flag(p)


def add_results_flags(p: argparse.ArgumentParser) -> None:
    """--results and --name: where an experiment's run folder goes and what ends its name."""
    p.add_argument("--results", default="results", help="where run folders go (default: results/)")
    p.add_argument(
        "--name",
        dest="run_name",
        type=run_name,
        metavar="NAME",
        help="end the run folder's name with NAME: results/<time>-NAME (letters, digits, . _ -)",
    )
