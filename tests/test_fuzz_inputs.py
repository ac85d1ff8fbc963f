"""Fuzz campaign over what a user types (issue #30): scenario JSON files, strategy and incast option
strings, --fault and --straggler specs, and the controller API's query strings. No root, no fabric.

The property, per case: the product answers with a result (exit 0 and one ok line; an HTTP 200) or a
refusal in one line (exit 2, one stderr line starting `incastlab`; an HTTP 4xx with a JSON error);
never an exception out of the parsing (a traceback), never longer than HANG_S, never a run folder
made. A config the check accepts must also be one a run can write (strict JSON, no NaN or Infinity,
which config.json refuses) and read back as the same config.

The commands run in this process through incastlab.cli._main, the console script's body, with
check.is_root faked False, so the kernel is not asked (what it can run is the machine's, not the
input's) and a case takes milliseconds. Hypothesis generates the cases from a seed drawn from the
`rng` fixture (printed: INCASTLAB_TEST_SEED=N replays a campaign); each test prints how many cases it
tried. Bounded: max_examples per kind, the whole file well under a minute
(INCASTLAB_FUZZ_SCALE=K runs K times as many cases, for hunting).
"""

from __future__ import annotations

import io
import json
import math
import os
import signal
import string
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from runmodel.config import STRAGGLER_KNOBS, ExperimentConfig, Straggler
from runmodel.fabric import FabricSpec
from runmodel.faults import KINDS as FAULT_KINDS
from runmodel.faults import parse_fault
from runmodel.incast import IncastConfig, IncastLine
from runmodel.params import ParamError
from runmodel.strategy import KINDS as STRATEGY_KINDS
from runmodel.strategy import StrategySpec

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "incastlab" / "scenarios"
HANG_S = 10.0  # no single case may take longer (a hang); Hypothesis' deadline flags a slow one earlier
DEADLINE_MS = 3000
SCALE = float(os.environ.get("INCASTLAB_FUZZ_SCALE", "1"))  # more cases when hunting (CI: 1)

# -- shared generators ------------------------------------------------------------------------------
ODD_NUMBERS = [
    "nan",
    "NaN",
    "inf",
    "-inf",
    "Infinity",
    "1e400",
    "-0",
    "0x10",
    "1_000",
    "",
    " ",
    "٣",
    "1e-400",
]
numberish = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(ODD_NUMBERS),
)
word = st.text(string.ascii_lowercase + string.digits + "_-.", max_size=12)
anytext = st.text(max_size=30)  # any unicode, newlines and NULs included
PLAUSIBLE = [
    "0",
    "1",
    "2",
    "4",
    "-1",
    "0.5",
    "1e-3",
    "2000",
    "2001",
    "cubic",
    "reno",
    "bbr",
    "dctcp",
    "vegas",
]
PLAUSIBLE += ["serial", "all", "colocated", "dedicated", "3", "0.25", "8", "1.5"]
value_text = st.one_of(st.sampled_from(PLAUSIBLE), st.sampled_from(PLAUSIBLE), numberish, word, anytext)
SPECIAL_FLOATS = st.sampled_from([math.inf, -math.inf, math.nan, 1e308, -0.0, 5e-324])
json_scalar = st.one_of(
    SPECIAL_FLOATS,
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
json_value = st.recursive(
    json_scalar,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=8,
)


def options_text(lead: st.SearchStrategy[str] | None, keys: list[str]) -> st.SearchStrategy[str]:
    """`LEAD:KEY=V:...` spellings: known and unknown keys, odd values, stray separators and spaces."""
    key = st.one_of(st.sampled_from(keys), word)
    part = st.one_of(
        st.builds(lambda k, v: f"{k}={v}", key, value_text),
        st.builds(lambda k: k, key),
        st.sampled_from(["", "=", "==", " : ", "=1=2"]),
    )
    parts = st.lists(part, max_size=4)
    known = st.lists(st.builds(lambda k, v: f"{k}={v}", st.sampled_from(keys), value_text), max_size=3)
    if lead is None:
        return st.one_of(parts.map(":".join), known.map(":".join), known.map(":".join), anytext)
    return st.one_of(
        st.builds(lambda h, p: ":".join([h, *p]), lead, parts),
        st.builds(lambda h, p: ":".join([h, *p]), st.sampled_from(STRATEGY_KINDS), known),
        st.builds(lambda h, p: ":".join([h, *p]), st.sampled_from(STRATEGY_KINDS), known),
        anytext,
    )


strategy_text = options_text(
    st.one_of(st.sampled_from(STRATEGY_KINDS), word), ["shards", "placement", "rto_min_ms", "cc", "pull"]
)
line_text = options_text(None, ["rto_min_ms", "cc", "buffer_pkts", "quickack", "max_concurrent", "base"])
when = st.one_of(
    st.sampled_from(["5s", "0s", "2.5s", "step1", "step3", "step0", "1"]),
    st.builds(lambda v: f"{v}s", numberish),
    st.builds(lambda v: f"step{v}", numberish),
    numberish,
    word,
)
target = st.one_of(
    st.sampled_from(["lf1-eth1", "sp2-eth4", "lf4-eth3", "0", "1", "6", "7", "h3=0.25", "h9=1", "h3=nan"]),
    st.builds(lambda h, v: f"{h}={v}", st.sampled_from(["h1", "h3", "h8", "h99"]), numberish),
    word,
    anytext,
)
fault_text = st.one_of(
    st.builds(
        lambda k, t, w: f"{k}:{t}@{w}" if t else f"{k}@{w}",
        st.sampled_from(FAULT_KINDS),
        st.sampled_from(["lf1-eth1", "sp1-eth2", "0", "2", "6", "h3=0.25", "h4=1", ""]),
        when,
    ),
    st.builds(
        lambda k, t, w, sep: f"{k}{sep}{t}@{w}",
        st.one_of(st.sampled_from(FAULT_KINDS), word),
        target,
        when,
        st.sampled_from([":", ":", "", "::"]),
    ),
    st.builds(lambda k, w: f"{k}@{w}", st.one_of(st.sampled_from(FAULT_KINDS), word), when),
    anytext,
)
straggler_text = st.one_of(
    st.builds(
        lambda h, kv: f"{h}:{','.join(kv)}",
        st.one_of(st.sampled_from(["h2", "h3", "h8", "h1", "h99", ""]), word),
        st.lists(
            st.builds(
                lambda k, v: f"{k}={v}",
                st.one_of(
                    st.sampled_from(list(STRAGGLER_KNOBS)), st.sampled_from(list(STRAGGLER_KNOBS)), word
                ),
                value_text,
            ),
            max_size=4,
        ),
    ),
    anytext,
)


# -- running one case ---------------------------------------------------------------------------------
class Hang(Exception):
    """A case ran longer than HANG_S."""


@contextmanager
def hang_guard(seconds: float = HANG_S) -> Iterator[None]:
    """Raise Hang in this (main) thread if the block runs longer than `seconds`."""

    def alarm(_signum: int, _frame: Any) -> None:
        raise Hang(f"a case ran longer than {seconds:g} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def as_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks a user without root gets: scenario and flags only (the machine's state stays out)."""
    from incastlab import check

    monkeypatch.setattr(check, "is_root", lambda: False)


OUTCOMES: dict[str, int] = {}  # per campaign: how many cases the CLI accepted (0) and refused (2)


def cli(argv: list[str], results: Path) -> tuple[int, str, str]:
    """`incastlab ARGV --results RESULTS` in this process: (exit code, stdout, stderr), checked against
    the property (one ok line with exit 0, or one `incastlab ...` line with exit 2; no run folder)."""
    from incastlab.cli import _main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), hang_guard():
        code = _main([*argv, f"--results={results}"])
    o, e = out.getvalue(), err.getvalue()
    if code == 0:
        assert e == "" and len(o.splitlines()) == 1 and ": ok (" in o, (argv, o, e)
    else:
        assert code == 2, (argv, code, o, e)
        assert o == "" and len(e.splitlines()) == 1 and e.startswith("incastlab"), (argv, o, e)
    assert not results.exists(), f"{argv} made {results}"
    OUTCOMES[str(code)] = OUTCOMES.get(str(code), 0) + 1
    return code, o, e


def one_line_refusal(exc: ParamError) -> None:
    """A refusal's message is one line: it ends up after `incastlab COMMAND: ` on a terminal."""
    text = str(exc)
    assert text and "\n" not in text and "\r" not in text, repr(text)


def writable(cfg: Any) -> None:
    """A config a check accepts is one a run can write as config.json and read back unchanged."""
    text = json.dumps(cfg.to_dict(), allow_nan=False)
    assert type(cfg).from_dict(json.loads(text)) == cfg


def campaign(
    rng: Any, name: str, cases: st.SearchStrategy[Any], check: Callable[[Any], None], n: int
) -> None:
    """Run `check` over `n` cases drawn from `cases` with a seed from `rng`; print how many were tried."""
    tried = 0
    OUTCOMES.clear()

    @seed(rng.randrange(2**32))
    @settings(
        max_examples=int(n * SCALE),
        deadline=DEADLINE_MS,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
    @given(cases)
    def one(case: Any) -> None:
        nonlocal tried
        tried += 1
        check(case)

    one()
    said = f" (exit 0: {OUTCOMES.get('0', 0)}, exit 2: {OUTCOMES.get('2', 0)})" if OUTCOMES else ""
    print(f"fuzz {name}: {tried} cases{said}, no traceback, none over {HANG_S:g} s")


# -- scenario files ---------------------------------------------------------------------------------
EXPERIMENT_FIELDS = sorted(ExperimentConfig.__dataclass_fields__)
INCAST_FIELDS = sorted(IncastConfig.__dataclass_fields__)
FABRIC_FIELDS = sorted(FabricSpec.__dataclass_fields__)


def field_value(key: str) -> st.SearchStrategy[Any]:
    """Values for a scenario field: what the field means (option strings, specs), or anything."""
    special: dict[str, st.SearchStrategy[Any]] = {
        "strategies": st.one_of(st.lists(strategy_text, max_size=3), strategy_text),
        "lines": st.one_of(st.lists(line_text, max_size=3), line_text),
        "faults": st.lists(fault_text, max_size=2),
        "stragglers": st.lists(
            st.dictionaries(
                st.sampled_from(["host", *STRAGGLER_KNOBS, "bogus"]),
                st.one_of(st.sampled_from(["h3", "h2", "h99"]), json_scalar),
                max_size=4,
            ),
            max_size=2,
        ),
        "fabric": st.dictionaries(
            st.sampled_from([*FABRIC_FIELDS, "bogus"]),
            st.one_of(st.integers(1, 4), st.floats(0, 100), SPECIAL_FLOATS, json_value),
            max_size=3,
        ),
        "controller": st.dictionaries(
            st.sampled_from(["api_port", "of_port", "interval", "api_host", "bogus"]), json_value, max_size=3
        ),
        "senders": st.lists(json_scalar, max_size=4),
    }
    sane = st.one_of(
        st.integers(-3, 40),
        st.floats(-1, 100),
        SPECIAL_FLOATS,
        st.sampled_from(["h1", "h3", "all", "none", "cubic"]),
    )
    return special.get(key, st.one_of(sane, json_value))


SHIPPED = {p.stem: json.loads(p.read_text()) for p in sorted(SCENARIO_DIR.glob("*.json"))}


def with_changes(name: str, changes: list[tuple[str, Any]]) -> dict[str, Any]:
    """A shipped scenario with a few fields (`steps`, or `fabric.delay_ms`) set to generated values."""
    doc = json.loads(json.dumps(SHIPPED[name]))
    for path, value in changes:
        head, _, tail = path.partition(".")
        if tail:
            inner = doc.setdefault(head, {})
            if isinstance(inner, dict):
                inner[tail] = value
        else:
            doc[head] = value
    return doc


def change(fields: list[str]) -> st.SearchStrategy[tuple[str, Any]]:
    return st.sampled_from(fields).flatmap(
        lambda f: st.tuples(st.just(f), st.one_of(SPECIAL_FLOATS, field_value(f.split(".")[-1])))
    )


SUB_FIELDS = [f"fabric.{f}" for f in FABRIC_FIELDS] + ["controller.api_port", "controller.interval"]
changed_shipped = st.builds(
    with_changes,
    st.sampled_from(sorted(SHIPPED)),
    st.lists(change(EXPERIMENT_FIELDS + INCAST_FIELDS + SUB_FIELDS), min_size=1, max_size=2),
)
scenario_doc = st.one_of(
    st.lists(st.sampled_from(EXPERIMENT_FIELDS + ["bogus", "kind"]), max_size=6, unique=True).flatmap(
        lambda keys: st.fixed_dictionaries({k: field_value(k) for k in keys})
    ),
    st.lists(st.sampled_from(INCAST_FIELDS + ["kind"]), max_size=6, unique=True).flatmap(
        lambda keys: st.fixed_dictionaries({k: field_value(k) for k in keys})
    ),
    # a shipped scenario with one or two fields changed: mostly valid, so the checks deep inside run
    changed_shipped,
    changed_shipped,
)


def mangle(doc: Any, how: int, at: int) -> str:
    """The scenario file's text: the JSON (NaN and Infinity as Python writes them), or cut or spoilt."""
    text = json.dumps(doc)
    if how == 1:
        return text[: at % (len(text) + 1)]
    if how == 2:
        i = at % (len(text) + 1)
        return text[:i] + "}\x00,[" + text[i:]
    return text


def test_fuzz_scenario_files(tmp_path, rng, as_user):
    scenario = tmp_path / "scenario.json"
    results = tmp_path / "results"

    def check(case: tuple[Any, int, int, list[str]]) -> None:
        doc, how, at, flags = case
        scenario.write_text(mangle(doc, how, at))
        code, _o, _e = cli(["check", str(scenario), *flags], results)
        if code == 0 and how == 0:  # what the check accepted, a run can write and read back
            from incastlab.check import scenario_command
            from runmodel.config import load_scenario
            from runmodel.incast import load_incast_scenario

            is_sweep = scenario_command(scenario, flags) == "incast"
            if not flags:
                writable(load_incast_scenario(scenario) if is_sweep else load_scenario(scenario))

    flags = st.lists(
        st.builds(
            lambda f, v: f"{f}={v}",
            st.sampled_from(["--steps", "--workers", "--grad-mb", "--timeout", "--interval", "--api-port"]),
            value_text,
        ),
        max_size=2,
    )
    flags = st.one_of(st.just([]), st.just([]), flags)
    cases = st.tuples(scenario_doc, st.sampled_from([0, 0, 0, 0, 1, 2]), st.integers(0, 10**6), flags)
    campaign(rng, "scenario JSON", cases, check, n=800)


# -- option strings -----------------------------------------------------------------------------------
def test_fuzz_option_strings(tmp_path, rng, as_user):
    results = tmp_path / "results"

    def check(case: tuple[str, str, str]) -> None:
        which, text, _ = case
        parse = StrategySpec.parse if which == "strategy" else IncastLine.parse
        with hang_guard():
            try:
                parse(text)
            except ParamError as exc:
                one_line_refusal(exc)
        if which == "strategy":
            cli(["check", "compare", f"--strategies={text}"], results)
        else:
            cli(["check", "incast", f"--lines={text}"], results)

    cases = st.one_of(
        st.tuples(st.just("strategy"), strategy_text, st.just("")),
        st.tuples(st.just("line"), line_text, st.just("")),
    )
    campaign(rng, "option strings (strategies, incast lines)", cases, check, n=700)


# -- fault and straggler specs ---------------------------------------------------------------------
def test_fuzz_fault_and_straggler_specs(tmp_path, rng, as_user):
    results = tmp_path / "results"
    cfg = ExperimentConfig()
    plan, workers = cfg.plan(), cfg.n_workers

    def check(case: tuple[str, str]) -> None:
        which, text = case
        with hang_guard():
            try:
                if which == "fault":
                    parse_fault(text, plan, workers)
                else:
                    Straggler.parse(text).validate()
            except ParamError as exc:
                one_line_refusal(exc)
        flag = "--fault" if which == "fault" else "--straggler"
        code, _o, _e = cli(["check", "compare", f"{flag}={text}"], results)
        if code == 0:
            given = {"faults": (text,)} if which == "fault" else {"stragglers": (Straggler.parse(text),)}
            writable(ExperimentConfig(**given))

    cases = st.one_of(
        st.tuples(st.just("fault"), fault_text), st.tuples(st.just("straggler"), straggler_text)
    )
    campaign(rng, "--fault and --straggler specs", cases, check, n=800)


# -- the controller API's query strings ------------------------------------------------------------
API_PATHS = ["/api/topology", "/api/ports", "/api/queues", "/api/timeseries", "/api/phase", "/api/events"]


def test_fuzz_api_query_strings(tmp_path, rng):
    """controller.api.ApiApp, the WSGI app the controller serves, called as the server calls it."""
    from controller.api import ApiApp
    from controller.stats import StatsStore

    plan = ExperimentConfig().plan()
    phase = tmp_path / "phase.json"
    phase.write_text(json.dumps({"state": "running", "strategy": "ps", "step": 3, "steps": 10}))
    app = ApiApp(plan, StatsStore(plan, clock=lambda: 1_000_000.0), connected=lambda: set(), phase_file=phase)

    def check(case: tuple[str, str, str]) -> None:
        method, path, query = case
        got: list[str] = []
        env = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query}
        with hang_guard():
            body = b"".join(app(env, lambda status, _headers: got.append(status)))
        code = int(got[0].split()[0])
        assert code in (200, 400, 404, 405, 414), (case, got[0], body[:200])
        if path.startswith("/api/") and method == "GET":
            doc = json.loads(body, parse_constant=lambda c: pytest.fail(f"{c} in {case}"))
            assert code == 200 or isinstance(doc.get("error"), str)
            if path == "/api/timeseries" and code == 200:
                assert math.isfinite(doc["t"])

    pair = st.builds(
        lambda k, v, sep: f"{k}{sep}{v}",
        st.one_of(st.sampled_from(["since", "since", "x", ""]), word),
        st.one_of(
            numberish, st.text(string.printable, max_size=15), st.sampled_from(["%zz", "%00", "%", "%2"])
        ),
        st.sampled_from(["=", "=", "", "=="]),
    )
    query = st.one_of(
        st.lists(pair, max_size=25).map("&".join),
        st.lists(pair, max_size=4).map(";".join),
        st.text(max_size=60),
        st.just("since=" + "9" * 3000),
    )
    path = st.one_of(
        st.sampled_from(API_PATHS + ["/", "/static/app.js", "/static/../api.py", "/nope"]),
        st.text(max_size=20),
    )
    cases = st.tuples(st.sampled_from(["GET", "GET", "GET", "HEAD", "POST"]), path, query)
    campaign(rng, "API query strings", cases, check, n=1500)
