"""controller.main's flags: ControllerOptions' own, so the launcher and the process agree on every
option and its default (a poll interval of 1.0 s in the process against the run model's 0.5 s, once)."""

from __future__ import annotations

import dataclasses

import pytest

from controller.main import RUNNER_ONLY, main, options_argv, options_of, parse_args
from runmodel.config import ControllerOptions


def test_the_process_defaults_are_the_run_models() -> None:
    assert options_of(parse_args(["--plan", "p.json"])) == ControllerOptions()
    assert parse_args(["--plan", "p.json"]).interval == ControllerOptions().interval == 0.5


def test_the_launchers_flags_give_the_process_the_same_options() -> None:
    given = ControllerOptions(api_port=9000, of_port=7000, interval=0.25, routing="hedera", of_host="0.0.0.0")
    got = options_of(parse_args(["--plan", "p.json", *options_argv(given)]))
    assert got == given
    launched = {f.name for f in dataclasses.fields(ControllerOptions)} - set(RUNNER_ONLY)
    assert {a.removeprefix("--").replace("-", "_") for a in options_argv(given)[::2]} == launched


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--interval", "0"], "interval"),
        (["--interval", "61"], "interval"),
        (["--of-port", "8080"], "differ"),
    ],
)
def test_a_bad_option_is_one_line_and_exit_2(tmp_path, capsys, flags: list[str], needle: str) -> None:
    assert main(["--plan", str(tmp_path / "none.json"), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("controller: ") and needle in err and "\n" not in err, err
