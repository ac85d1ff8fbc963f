"""The one option grammar (runmodel.options) that strategy variants and incast curves share:
text -> fields by the fields' types, the canonical name, the folder, and one-line refusals.

Names and folders are checked against spellings written out by hand: the folders earlier runs
are stored under (tests/data, the mitigate integration test) and the refusals the command printed
before the grammar was shared."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from incastlab.cli import SCENARIO_DIR
from runmodel.incast import DEFAULT_LINES, IncastLine, LineSettings
from runmodel.options import OptionGrammar, folder_name
from runmodel.params import ParamError
from runmodel.strategy import StrategySpec

DATA = Path(__file__).resolve().parent / "data"


# -- the grammar on dataclasses of its own ----------------------------------------------------------
@dataclass(frozen=True)
class Knob:
    """A lead by position and options with defaults, as a strategy has."""

    kind: str
    size: int = 1
    rate: float | None = None
    mode: str = "a"


@dataclass(frozen=True)
class Over:
    """Options over a base, none by default, as an incast curve has."""

    x: int | None = None
    y: str | None = None


KNOB = OptionGrammar(what="knobs", example="k:size=2", lead="kind")
OVER = OptionGrammar(what="overs", example="x=1", empty="base")


@pytest.mark.parametrize(
    ("grammar", "owner", "text", "value", "name", "folder"),
    [
        (KNOB, Knob, "k", Knob("k"), "k", "k"),
        (
            KNOB,
            Knob,
            " k : mode=b : size=3 ",
            Knob("k", size=3, mode="b"),
            "k:size=3:mode=b",
            "k_size-3_mode-b",
        ),
        (KNOB, Knob, "k:size=1:mode=a", Knob("k"), "k", "k"),  # a default spelled out is no option
        (KNOB, Knob, "k:rate=0.5", Knob("k", rate=0.5), "k:rate=0.5", "k_rate-0.5"),
        (KNOB, Knob, "k:rate=2.0", Knob("k", rate=2.0), "k:rate=2", "k_rate-2"),
        (KNOB, Knob, "k:size=2:size=4", Knob("k", size=4), "k:size=4", "k_size-4"),  # the last one counts
        (OVER, Over, "", Over(), "base", "base"),
        (OVER, Over, "base", Over(), "base", "base"),
        (OVER, Over, "y=q:x=7", Over(x=7, y="q"), "x=7:y=q", "x-7_y-q"),
        (OVER, Over, "x=0", Over(x=0), "x=0", "x-0"),  # a value, not the absent default
    ],
)
def test_text_reads_into_typed_fields_and_names_them_in_field_order(
    grammar: OptionGrammar, owner: type, text: str, value: object, name: str, folder: str
) -> None:
    got = grammar.parse(owner, text)
    assert got == value
    assert grammar.name(got) == name and grammar.folder(got) == folder == folder_name(name)
    again = grammar.parse(owner, grammar.name(got))
    assert again == got and grammar.name(again) == name  # name -> parse -> name
    assert [type(v) for v in vars(got).values()] == [type(v) for v in vars(value).values()]  # 3 -> int


def test_options_are_the_non_default_fields_in_field_order() -> None:
    assert KNOB.options(Knob("k", mode="b", rate=1.5)) == (("rate", 1.5), ("mode", "b"))
    assert OVER.options(Over(y="q")) == (("y", "q"),) and OVER.options(Over()) == ()


@pytest.mark.parametrize(
    ("grammar", "owner", "text", "message"),
    [
        (
            KNOB,
            Knob,
            "k:speed=2",
            "knobs: 'k:speed=2': unknown option 'speed' (options: size, rate, mode; e.g. k:size=2)",
        ),
        (
            KNOB,
            Knob,
            "k:size",
            "knobs: 'k:size': unknown option 'size' (options: size, rate, mode; e.g. k:size=2)",
        ),
        (
            KNOB,
            Knob,
            "k:kind=j",
            "knobs: 'k:kind=j': unknown option 'kind' (options: size, rate, mode; e.g. k:size=2)",
        ),
        (KNOB, Knob, "k:size=2.5", "knobs: 'k:size=2.5': size needs a number, got '2.5'"),
        (KNOB, Knob, "k:rate=fast", "knobs: 'k:rate=fast': rate needs a number, got 'fast'"),
        (OVER, Over, "base:x=1", "overs: 'base:x=1': unknown option 'base' (options: x, y; e.g. x=1)"),
        (OVER, Over, "x=", "overs: 'x=': x needs a number, got ''"),
    ],
)
def test_unknown_keys_and_unreadable_values_are_refused_in_one_line(
    grammar: OptionGrammar, owner: type, text: str, message: str
) -> None:
    with pytest.raises(ParamError) as err:
        grammar.parse(owner, text)
    assert str(err.value) == message


def test_a_field_type_the_grammar_cannot_read_is_a_programming_error() -> None:
    @dataclass(frozen=True)
    class Odd:
        flags: tuple[int, ...] = ()

    with pytest.raises(TypeError, match="no reader"):
        OVER.parse(Odd, "flags=1")


# -- the owners: names and folders that stored runs already use ---------------------------------
@pytest.mark.parametrize(
    ("owner", "text", "name", "folder"),
    [
        (StrategySpec, "ps", "ps", "ps"),
        (StrategySpec, "ps:shards=1", "ps", "ps"),
        (
            StrategySpec,
            "ps:cc=reno:rto_min_ms=1.0:shards=2",
            "ps:shards=2:rto_min_ms=1:cc=reno",
            "ps_shards-2_rto_min_ms-1_cc-reno",
        ),
        (
            StrategySpec,
            "ps:cc=reno:placement=colocated:rto_min_ms=1:shards=2",
            "ps:shards=2:placement=colocated:rto_min_ms=1:cc=reno",
            "ps_shards-2_placement-colocated_rto_min_ms-1_cc-reno",
        ),
        (StrategySpec, "ps:pull=serial:shards=4", "ps:shards=4:pull=serial", "ps_shards-4_pull-serial"),
        (StrategySpec, "ps:rto_min_ms=0.5", "ps:rto_min_ms=0.5", "ps_rto_min_ms-0.5"),
        (StrategySpec, "ring:cc=bbr", "ring:cc=bbr", "ring_cc-bbr"),
        (IncastLine, "base", "base", "base"),
        (IncastLine, " cc=reno:rto_min_ms=1 ", "rto_min_ms=1:cc=reno", "rto_min_ms-1_cc-reno"),
        (IncastLine, "buffer_pkts=1000", "buffer_pkts=1000", "buffer_pkts-1000"),
        (
            IncastLine,
            "max_concurrent=2:quickack=1",
            "quickack=1:max_concurrent=2",
            "quickack-1_max_concurrent-2",
        ),
        (IncastLine, "cc=cubic", "cc=cubic", "cc-cubic"),  # the base's own value, still a curve of its own
    ],
)
def test_a_variant_keeps_the_name_and_folder_its_runs_are_stored_under(
    owner: type, text: str, name: str, folder: str
) -> None:
    variant = owner.parse(text)
    assert (variant.name, variant.folder) == (name, folder)
    assert owner.parse(variant.name) == variant


def test_every_shipped_variant_round_trips() -> None:
    strategies = [
        s
        for p in sorted(SCENARIO_DIR.glob("*.json"))
        for s in json.loads(p.read_text()).get("strategies", [])
    ]
    lines = json.loads((SCENARIO_DIR / "incast.json").read_text())["lines"]
    assert "ps:shards=4:pull=serial" in strategies and "cc=dctcp" in lines  # the files hold what is tested
    for text in strategies:
        assert StrategySpec.parse(text).name == text  # the scenarios spell them canonically
    for text in (*lines, *DEFAULT_LINES):
        assert IncastLine.parse(text).name == text


def test_the_stored_run_has_a_folder_for_each_strategy_it_names() -> None:
    run = DATA / "run-small"
    names = json.loads((run / "config.json").read_text())["strategies"]
    assert names and all((run / StrategySpec.parse(n).folder).is_dir() for n in names)


def test_every_line_option_is_a_setting_of_the_same_type() -> None:
    settings = {f.name: f.type for f in fields(LineSettings)}
    for f in fields(IncastLine):
        assert f.name in settings and str(f.type) == f"{settings[f.name]} | None", f.name


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (
            StrategySpec.parse,
            "ps:turbo=1",
            "strategies: 'ps:turbo=1': unknown option 'turbo' "
            "(options: shards, placement, rto_min_ms, cc, pull, stages, micro, schedule, size, experts, "
            "dp, pp; ",
        ),
        (
            StrategySpec.parse,
            "ps:shards=two",
            "strategies: 'ps:shards=two': shards needs a number, got 'two'",
        ),
        (StrategySpec.parse, "gossip:turbo=1", "strategies: unknown strategy 'gossip' (known: "),
        (
            IncastLine.parse,
            "foo=1",
            "lines: 'foo=1': unknown option 'foo' "
            "(options: rto_min_ms, cc, buffer_pkts, quickack, max_concurrent; e.g. rto_min_ms=1 or cc=reno)",
        ),
        (
            IncastLine.parse,
            "buffer_pkts=2.5",
            "lines: 'buffer_pkts=2.5': buffer_pkts needs a number, got '2.5'",
        ),
    ],
)
def test_the_owners_refuse_with_the_messages_they_printed_before(parse, text: str, message: str) -> None:
    with pytest.raises(ParamError) as err:
        parse(text)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
