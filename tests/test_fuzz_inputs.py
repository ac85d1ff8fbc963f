"""Fuzz campaign over what a user types (issue #30): scenario JSON files, strategy and incast option
strings, --fault and --straggler specs, and the controller API's query strings. No root, no fabric.

The property, per case: the product answers with a result (exit 0 and one ok line; an HTTP 200) or a
refusal in one line (exit 2, one stderr line starting `incastlab`; an HTTP 4xx with a JSON error);
never an exception out of the parsing (a traceback), never longer than HANG_S, never a run folder
made. A config the check accepts must also be one a run can write (strict JSON, no NaN or Infinity,
which config.json refuses) and read back as the same config.

Each campaign also checks that it ran what it says (issue #36): exactly max_examples cases, and for
every generator both an accepted case and a refused one (a parser that refuses everything, or takes
anything, fails here); the option strings must have each of the grammar's keys (read off the
product's own OptionGrammar, so a new option is fuzzed once it exists) accepted at a value other
than its default, and the API fuzz must have every /api/* path answer 200, /api/flows's `top` both
taken and refused, and the flows it returns be the `top` fastest.

The commands run in this process through incastlab.cli._main, the console script's body, with
check.is_root faked False, so the kernel is not asked (what it can run is the machine's, not the
input's) and a case takes milliseconds. Hypothesis generates the cases from a seed drawn from the
`rng` fixture (printed: INCASTLAB_TEST_SEED=N replays a campaign); each test prints how many cases it
tried. Bounded: max_examples per kind, the whole file about a minute on a busy 2-core machine
(INCASTLAB_FUZZ_SCALE=K runs K times as many cases, for hunting).
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import signal
import string
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from runmodel.config import STRAGGLER_KNOBS, ExperimentConfig, Straggler
from runmodel.fabric import FabricSpec
from runmodel.faults import KINDS as FAULT_KINDS
from runmodel.faults import parse_fault
from runmodel.incast import IncastConfig, IncastLine
from runmodel.params import ParamError
from runmodel.strategy import CONGESTION_CONTROLS, PLACEMENTS, PULLS, SCHEDULES, StrategySpec
from runmodel.strategy import KINDS as STRATEGY_KINDS

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
PLAUSIBLE += ["serial", "all", "colocated", "dedicated", "3", "0.25", "8", "1.5", "gpipe", "1f1b", "6"]
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


STRATEGY_KEYS = [f.name for f in StrategySpec.GRAMMAR.keys(StrategySpec)]  # the product's own list
LINE_KEYS = [f.name for f in IncastLine.GRAMMAR.keys(IncastLine)]
# the kinds each strategy option belongs to, as runmodel/strategy.py's docstring spells them: the
# mostly-valid strings below give a key one of its own kinds, so every key gets accepted somewhere
OWN_KINDS: dict[str, tuple[str, ...]] = {
    "shards": ("ps", "async"),
    "placement": ("ps", "async", "ssp", "backup"),
    "pull": ("ps", "async", "ssp", "backup"),
    "rto_min_ms": ("ps", "ring", "allreduce", "fsdp"),
    "cc": ("ps", "ring", "allreduce", "moe"),
    "stages": ("pp",),
    "micro": ("pp", "hybrid"),
    "schedule": ("pp", "hybrid"),
    "size": ("tp",),
    "experts": ("moe",),
    "dp": ("hybrid",),
    "pp": ("hybrid",),
}
# option values (strategies' and incast lines'): spellings a kind takes, not its default (the
# product's own names; whole numbers in the bounds that 7 workers allow), and near misses: past the
# bounds, other spellings of a number, other names
TAKEN = {
    "shards": ("2", "3"),
    "stages": ("3", "4", "7"),
    "micro": ("1", "2", "8"),
    "size": ("2", "4", "7"),
    "experts": ("2", "3"),
    "dp": ("1", "3"),
    "pp": ("3",),
    "placement": PLACEMENTS[1:],  # the first is the default, among the misses (taken, but no option)
    "pull": PULLS[1:],
    "schedule": SCHEDULES[1:],
    "cc": CONGESTION_CONTROLS,
    "rto_min_ms": ("1", "200", "0.5", "2000"),
    "buffer_pkts": ("1", "100", "100000"),
    "quickack": ("0", "1"),
    "max_concurrent": ("0", "1", "4"),
}
MISSES = {
    "placement": (PLACEMENTS[0], "Colocated", "shared", ""),
    "pull": (PULLS[0], "Serial", "any", ""),
    "schedule": (SCHEDULES[0], "1F1B", "1f2b", "interleaved"),
    "cc": ("vegas", "CUBIC", "bbr2"),
    "rto_min_ms": ("2001", "0", "-1", "nan", "inf", "1e-400"),
    "buffer_pkts": ("0", "100001", "-1", "1.5"),
    "quickack": ("2", "-1", "yes"),
    "max_concurrent": ("-1", "1.5", ""),
}
WHOLE_MISSES = ("0", "1", "8", "9", "-1", "2.5", "03", " 2", "")


def own_value(key: str) -> st.SearchStrategy[str]:
    """A value for option `key`: mostly one it takes, else a near miss or anything."""
    pools = {
        "taken": st.sampled_from(TAKEN[key]),
        "miss": st.sampled_from(MISSES.get(key, WHOLE_MISSES)),
        "any": value_text,
    }  # drawn by name: one_of would flatten value_text's branches in, and weigh each as one
    return st.sampled_from(["taken", "taken", "taken", "miss", "any"]).flatmap(pools.__getitem__)


def own_options(key: str) -> st.SearchStrategy[str]:
    """`KIND:KEY=V[:KEY2=V2]`: one of the key's own kinds, with perhaps another key that kind owns."""

    def spelled(kind: str) -> st.SearchStrategy[str]:
        also = [k for k, kinds in OWN_KINDS.items() if kind in kinds and k != key]
        extra = st.sampled_from(also).flatmap(lambda k2: own_value(k2).map(lambda v2: f"{k2}={v2}"))
        return st.builds(
            lambda v, rest: ":".join([kind, f"{key}={v}", *rest]),
            own_value(key),
            st.lists(extra, max_size=1) if also else st.just([]),
        )

    return st.sampled_from(OWN_KINDS[key]).flatmap(spelled)


owned_strategy = st.sampled_from(sorted(OWN_KINDS)).flatmap(own_options)
strategy_text = st.sampled_from([0, 1, 1]).flatmap(  # by index, as in own_value: half or more valid
    [
        options_text(st.one_of(st.sampled_from(STRATEGY_KINDS), word), STRATEGY_KEYS),
        owned_strategy,
    ].__getitem__
)
owned_line = st.sampled_from(LINE_KEYS).flatmap(
    lambda key: st.builds(
        lambda v, rest: ":".join([f"{key}={v}", *rest]),
        own_value(key),
        st.lists(
            st.sampled_from([k for k in LINE_KEYS if k != key]).flatmap(
                lambda k2: own_value(k2).map(lambda v2: f"{k2}={v2}")
            ),
            max_size=1,
        ),
    )
)
line_text = st.sampled_from([0, 1, 1]).flatmap(
    [options_text(None, [*LINE_KEYS, "base"]), owned_line].__getitem__
)
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
random_fault = st.one_of(
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
random_straggler = st.one_of(
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


def taken_or_not(
    taken: list[str], misses: list[str], anything: st.SearchStrategy[str]
) -> st.SearchStrategy[str]:
    """Mostly a spelling the product takes, else a near miss or anything (drawn by name, as own_value)."""
    pools = {"taken": st.sampled_from(taken), "miss": st.sampled_from(misses), "any": anything}
    return st.sampled_from(["taken", "taken", "taken", "taken", "miss", "any"]).flatmap(pools.__getitem__)


# mostly-valid faults and stragglers: targets of the default fabric (its own port and host names)
PLAN = ExperimentConfig().plan()
PORTS = sorted(PLAN.port_names())
WORKER_HOSTS = ["h2", "h3", "h5", "h8"]  # the default run's workers (h1 is the PS)
FAULT_TARGETS = {
    "link-down": (PORTS, ["lf9-eth1", "lf1-eth99", "", "LF1-ETH1"]),
    "link-up": (PORTS, ["lf9-eth1", "", "h3"]),
    "flap": (PORTS, ["sp9-eth1", "", "0"]),
    "kill-worker": (["0", "3", "6"], ["7", "-1", "²", "٣", "1.0", "h3", ""]),
    "controller-restart": ([""], ["x", "0"]),
    "controller-kill": ([""], ["x", "lf1-eth1"]),
    "cpu": (["h3=0.25", "h2=1", "h5=0.5"], ["h3=0", "h3=1.5", "h3=nan", "h99=0.5", "h3", "h3=²"]),
}
WHEN_TAKEN = ["5s", "0s", "2.5s", "7", "step1", "step3", "step10"]
WHEN_MISSES = ["5", "-1s", "step", "step-1", "1e3s", "5ms", "step²", "٣s", ""]


def owned_fault(kind: str) -> st.SearchStrategy[str]:
    """`KIND[:TARGET]@WHEN` with a target of the kind's own (or a near miss)."""
    taken, misses = FAULT_TARGETS[kind]
    return st.builds(
        lambda t, w: f"{kind}:{t}@{w}" if t else f"{kind}@{w}",
        taken_or_not(taken, misses, target),
        taken_or_not(WHEN_TAKEN, WHEN_MISSES, when),
    )


KNOB_VALUES = {  # each straggler knob: values it takes, near misses
    "cpu": (["0.25", "0.5", "1"], ["0", "1.5", "nan", "-0.1"]),
    "link_mbit": (["5", "0.5", "100"], ["0", "-5", "inf"]),
    "slow_every": (["3", "1", "10"], ["0", "-1", "1.5", "x"]),  # 0 (the default) taken, but no knob
    "slow_factor": (["4", "1.5"], ["1", "0.5", "nan"]),
    "compute_factor": (["2", "1.5"], ["1", "0", "0.99"]),
    "cpuset": (["0", "0-1", "1"], ["", "x"]),
    "mem_mb": (["256", "1024"], ["0", "-1", "nan"]),
}


def owned_straggler(knobs: list[str]) -> st.SearchStrategy[str]:
    """`HOST:KNOB=V[,KNOB=V]` on a worker host (or a near miss), each knob mostly a value it takes."""
    return st.builds(
        lambda h, kv: f"{h}:{','.join(kv)}",
        taken_or_not(WORKER_HOSTS, ["h1", "h99", "", "H3"], word),
        st.tuples(*(taken_or_not(*KNOB_VALUES[k], value_text).map(lambda v, k=k: f"{k}={v}") for k in knobs)),
    )


fault_text = st.sampled_from([0, 1, 1]).flatmap(
    [random_fault, st.sampled_from(FAULT_KINDS).flatmap(owned_fault)].__getitem__
)
straggler_text = st.sampled_from([0, 1, 1]).flatmap(
    [
        random_straggler,
        st.lists(st.sampled_from(sorted(STRAGGLER_KNOBS)), min_size=1, max_size=2, unique=True).flatmap(
            owned_straggler
        ),
    ].__getitem__
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


OUTCOMES: Counter[tuple[str, str]] = Counter()  # per campaign: (generator, accepted|refused) -> cases
ACCEPTED: Counter[tuple[str, str]] = Counter()  # per campaign: (generator, option key) accepted


def tally(kind: str, accepted: bool) -> None:
    """Count one case of generator `kind` as accepted (exit 0, HTTP 200) or refused."""
    OUTCOMES[(kind, "accepted" if accepted else "refused")] += 1


def cli(argv: list[str], results: Path, kind: str) -> tuple[int, str, str]:
    """`incastlab ARGV --results RESULTS` in this process: (exit code, stdout, stderr), checked against
    the property (one ok line with exit 0, or one `incastlab ...` line with exit 2; no run folder),
    and tallied as a case of generator `kind`."""
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
    tally(kind, code == 0)
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
    rng: Any,
    name: str,
    cases: st.SearchStrategy[Any],
    check: Callable[[Any], None],
    n: int,
    kinds: tuple[str, ...],
) -> None:
    """Run `check` over `n` cases drawn from `cases` with a seed from `rng`; print how many were tried,
    and assert it was `n` and that each generator in `kinds` had a case accepted and one refused."""
    tried = 0
    OUTCOMES.clear()
    ACCEPTED.clear()
    wanted = int(n * SCALE)

    @seed(rng.randrange(2**32))
    @settings(
        max_examples=wanted,
        deadline=DEADLINE_MS,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(cases)
    def one(case: Any) -> None:
        nonlocal tried
        tried += 1
        check(case)

    one()
    said = ", ".join(f"{k} {OUTCOMES[(k, 'accepted')]}/{OUTCOMES[(k, 'refused')]}" for k in kinds)
    print(f"fuzz {name}: {tried} cases (accepted/refused: {said}), no traceback, none over {HANG_S:g} s")
    assert tried == wanted, f"{name}: Hypothesis ran {tried} cases of the {wanted} asked for"
    for kind in kinds:
        assert OUTCOMES[(kind, "accepted")] >= 1, f"{name}: no {kind} case was accepted"
        assert OUTCOMES[(kind, "refused")] >= 1, f"{name}: no {kind} case was refused"


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
SCENARIO_KINDS = ("random fields", "shipped, changed")
scenario_doc = st.one_of(
    st.lists(st.sampled_from(EXPERIMENT_FIELDS + ["bogus", "kind"]), max_size=6, unique=True)
    .flatmap(lambda keys: st.fixed_dictionaries({k: field_value(k) for k in keys}))
    .map(lambda doc: ("random fields", doc)),
    st.lists(st.sampled_from(INCAST_FIELDS + ["kind"]), max_size=6, unique=True)
    .flatmap(lambda keys: st.fixed_dictionaries({k: field_value(k) for k in keys}))
    .map(lambda doc: ("random fields", doc)),
    # a shipped scenario with one or two fields changed: mostly valid, so the checks deep inside run
    changed_shipped.map(lambda doc: ("shipped, changed", doc)),
    changed_shipped.map(lambda doc: ("shipped, changed", doc)),
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

    def check(case: tuple[tuple[str, Any], int, int, list[str]]) -> None:
        (kind, doc), how, at, flags = case
        scenario.write_text(mangle(doc, how, at))
        code, _o, _e = cli(["check", str(scenario), *flags], results, kind)
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
    campaign(rng, "scenario JSON", cases, check, n=800, kinds=SCENARIO_KINDS)


# -- option strings -----------------------------------------------------------------------------------
def test_fuzz_option_strings(tmp_path, rng, as_user):
    results = tmp_path / "results"

    def check(case: tuple[str, str]) -> None:
        which, text = case
        parse = StrategySpec.parse if which == "strategy" else IncastLine.parse
        with hang_guard():
            try:
                parse(text)
            except ParamError as exc:
                one_line_refusal(exc)
        command, flag = ("compare", "--strategies") if which == "strategy" else ("incast", "--lines")
        code, _o, _e = cli(["check", command, f"{flag}={text}"], results, which)
        if code == 0:  # the keys the CLI took at a value of their own (the flag is a comma list)
            for part in filter(str.strip, text.split(",")):
                variant = parse(part)
                for key, _value in type(variant).GRAMMAR.options(variant):
                    ACCEPTED[(which, key)] += 1

    texts = {"strategy": strategy_text, "line": line_text}  # strategies have 12 keys to reach, lines 5
    cases = st.sampled_from(["strategy", "strategy", "strategy", "line"]).flatmap(
        lambda which: st.tuples(st.just(which), texts[which])
    )
    campaign(
        rng, "option strings (strategies, incast lines)", cases, check, n=1000, kinds=("strategy", "line")
    )
    print("keys accepted at a value of their own:", dict(sorted(ACCEPTED.items())))
    for which, keys in (("strategy", STRATEGY_KEYS), ("line", LINE_KEYS)):
        missed = [k for k in keys if not ACCEPTED[(which, k)]]
        assert not missed, f"no accepted {which} set {missed} (a key the fuzz never got past the parser)"


def test_the_fuzzed_strategy_options_are_every_option_the_grammar_has():
    """OWN_KINDS, the kinds the mostly-valid strings give each key, holds every key there is."""
    assert sorted(OWN_KINDS) == sorted(STRATEGY_KEYS)
    assert {"stages", "micro", "schedule", "size", "experts", "dp", "pp"} <= set(STRATEGY_KEYS)


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
        code, _o, _e = cli(["check", "compare", f"{flag}={text}"], results, which)
        if code == 0:
            given = {"faults": (text,)} if which == "fault" else {"stragglers": (Straggler.parse(text),)}
            writable(ExperimentConfig(**given))
            if which == "fault":
                ACCEPTED[("fault", text.split("@")[0].split(":")[0].strip())] += 1
            else:
                got, plain = Straggler.parse(text), Straggler(host="")
                for key in STRAGGLER_KNOBS:
                    ACCEPTED[("straggler", key)] += getattr(got, key) != getattr(plain, key)

    texts = {"fault": fault_text, "straggler": straggler_text}  # 7 fault kinds; a straggler has 1-2 knobs
    cases = st.sampled_from(["fault", "fault", "straggler"]).flatmap(
        lambda which: st.tuples(st.just(which), texts[which])
    )
    campaign(rng, "--fault and --straggler specs", cases, check, n=800, kinds=("fault", "straggler"))
    print("fault kinds and straggler knobs accepted:", dict(sorted(ACCEPTED.items())))
    missed = [k for k in FAULT_KINDS if not ACCEPTED[("fault", k)]]
    missed += [k for k in STRAGGLER_KNOBS if not ACCEPTED[("straggler", k)]]
    assert not missed, f"no accepted spec had {missed} (a kind or knob the fuzz never got past the parser)"


# -- the controller API's query strings ------------------------------------------------------------
API_PATHS = [
    "/api/topology",
    "/api/ports",
    "/api/queues",
    "/api/timeseries",
    "/api/phase",
    "/api/events",
    "/api/flows",
]
N_FLOWS = 30  # flows in the fuzzed API's book: more than the default top (20), fewer than the most (1000)
TOP_TAKEN = ["1", "2", "19", "20", "21", "30", "31", "1000", "05"]  # fewer, as many and more than N_FLOWS
TOP_MISSES = ["0", "1001", "-1", "+5", " 5", "5 ", "", "1e2", "²", "%C2%B2", "٣", "%D9%A3", "1%20", "9" * 40]


def flow_book(plan: Any) -> Any:
    """A controller.flows.FlowBook holding N_FLOWS flows between the plan's hosts, each at a rate of
    its own (the ingress leaf's counters polled twice, a second apart, as the controller does)."""
    from controller.flows import FlowBook
    from controller.routing import FlowKey

    book = FlowBook(plan)
    hosts = plan.hosts
    for i in range(N_FLOWS):
        src, dst = hosts[i % len(hosts)], hosts[(i + 1) % len(hosts)]
        key = FlowKey("tcp", src.ip, dst.ip, 40000 + i, 29500)
        book.leaf_counts(key, src.leaf, 1000, 1, duration=1.0, t=100.0)
        book.leaf_counts(key, src.leaf, 1000 + 500 * (i * 7 % N_FLOWS), 2, duration=2.0, t=101.0)
    return book


def asked_top(query: str) -> int | None:
    """How many flows /api/flows?QUERY asks for: its last `top`, ASCII digits for 1..1000 (default
    20); None where the API must refuse it (a bad top, or more than 20 fields)."""
    try:
        params = parse_qs(query, keep_blank_values=True, max_num_fields=20)
    except ValueError:
        return None
    raw = params.get("top", ["20"])[-1]
    return int(raw) if re.fullmatch(r"[0-9]+", raw) and 1 <= int(raw) <= 1000 else None


def test_fuzz_api_query_strings(tmp_path, rng):
    """controller.api.ApiApp, the WSGI app the controller serves, called as the server calls it, with
    a FlowBook behind /api/flows as controller.app wires it."""
    from controller.api import ApiApp
    from controller.stats import StatsStore

    plan = ExperimentConfig().plan()
    phase = tmp_path / "phase.json"
    phase.write_text(json.dumps({"state": "running", "strategy": "ps", "step": 3, "steps": 10}))
    book = flow_book(plan)
    rates = sorted((round(s.rate_bps, 1) for s in book.flows.values()), reverse=True)
    assert len(set(rates)) == N_FLOWS  # a rate each, so the top n are one set
    store = StatsStore(plan, clock=lambda: 1_000_000.0)
    app = ApiApp(
        plan, store, connected=lambda: set(), phase_file=phase, flows=lambda n: book.top(store.now(), n)
    )

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
            if code == 200:
                ACCEPTED[("api", path)] += 1
            if path == "/api/timeseries" and code == 200:
                assert math.isfinite(doc["t"])
            if path == "/api/flows" and code != 414:
                n = asked_top(query)
                assert (code == 200) == (n is not None), (case, code, doc)
                if n is not None:  # the n fastest flows, fastest first
                    assert [f["rate_bps"] for f in doc["flows"]] == rates[:n], (case, doc["flows"][:3])
                if "top" in parse_qs(query, keep_blank_values=True):
                    tally("top", code == 200)

    pair = st.builds(
        lambda k, v, sep: f"{k}{sep}{v}",
        st.one_of(st.sampled_from(["since", "since", "top", "top", "x", ""]), word),
        st.one_of(
            numberish,
            st.sampled_from(TOP_TAKEN + TOP_MISSES),
            st.text(string.printable, max_size=15),
            st.sampled_from(["%zz", "%00", "%", "%2", "%C2%B2", "1%20"]),
        ),
        st.sampled_from(["=", "=", "", "=="]),
    )
    query = st.one_of(
        st.lists(pair, max_size=25).map("&".join),
        st.lists(pair, max_size=4).map("&".join),
        st.lists(pair, max_size=4).map(";".join),
        st.text(max_size=60),
        st.just("since=" + "9" * 3000),
    )
    paths = {  # drawn by name, so each /api/* path gets its share
        "api": st.sampled_from(API_PATHS),
        "other": st.sampled_from(["/", "/static/app.js", "/static/../api.py", "/nope", "/api/flows/"]),
        "any": st.text(max_size=20),
    }
    path = st.sampled_from(["api", "api", "other", "any"]).flatmap(paths.__getitem__)
    top_values = {  # drawn by name, as own_value's
        "taken": st.sampled_from(TOP_TAKEN),
        "miss": st.sampled_from(TOP_MISSES),
        "any": st.one_of(numberish, st.text(string.printable, max_size=6)),
    }
    top_query = st.builds(
        lambda before, v, after: "&".join([*before, f"top={v}", *after]),
        st.lists(pair, max_size=2),
        st.sampled_from(["taken", "taken", "miss", "any"]).flatmap(top_values.__getitem__),
        st.lists(pair, max_size=2),
    )
    anything = st.tuples(st.sampled_from(["GET", "GET", "GET", "HEAD", "POST"]), path, query)
    cases = st.sampled_from(["any", "any", "flows"]).flatmap(
        lambda kind: anything
        if kind == "any"
        else st.tuples(st.just("GET"), st.just("/api/flows"), top_query)
    )
    campaign(rng, "API query strings", cases, check, n=1500, kinds=("top",))
    print("200s by path:", {p: ACCEPTED[("api", p)] for p in API_PATHS})
    silent = [p for p in API_PATHS if not ACCEPTED[("api", p)]]
    assert not silent, f"{silent} never answered 200"
