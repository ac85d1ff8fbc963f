"""One declaration per parameter: a dataclass field carries its help, unit and flag.

`param()` is `dataclasses.field()` with the command-line facts in its metadata; the CLI builds
every flag from these fields (incastlab.cli), so a field cannot exist without its flag, nor a flag
without its field, and the help text shows the one default there is.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any


class ParamError(ValueError):
    """A parameter that cannot be; the message is one line naming the field."""


def param(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    flag: str | None = None,  # noqa: A002
    aliases: tuple[str, ...] = (),
    choices: tuple[Any, ...] | None = None,
    parse: Callable[[str], Any] | None = None,
    metavar: str | None = None,
    repeat: bool = False,
    factory: Callable[[], Any] | None = None,
    cli: bool = True,
) -> Any:
    """A dataclass field with its flag: `--<name with dashes>` unless `flag` says otherwise.

    parse: turns the flag's text into the field's value (default: the field's type); repeat: the
    flag may be given several times, each value appended (list fields); cli=False: no flag (a
    value the run itself fills in, never a user's choice).
    """
    meta = {
        "help": help,
        "flag": flag,
        "aliases": aliases,
        "choices": choices,
        "parse": parse,
        "metavar": metavar,
        "repeat": repeat,
        "cli": cli,
    }
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True)
class Flag:
    """What the CLI needs to know of one field."""

    owner: type
    name: str
    flag: str
    aliases: tuple[str, ...]
    help: str
    default: Any
    parse: Callable[[str], Any]
    choices: tuple[Any, ...] | None
    metavar: str | None
    repeat: bool


_TYPES: dict[str, Callable[[str], Any]] = {"int": int, "float": float, "str": str, "bool": bool}


def _parser_for(f: dataclasses.Field[Any]) -> Callable[[str], Any]:
    if f.metadata.get("parse"):
        return f.metadata["parse"]
    name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "str")
    base = name.replace(" | None", "").strip()
    return _TYPES.get(base, str)


def default_of(f: dataclasses.Field[Any]) -> Any:
    """A field's default value (calling its factory)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def flags(cls: type) -> Iterator[Flag]:
    """The command-line flags of a parameter dataclass, in field order."""
    for f in dataclasses.fields(cls):
        if not f.metadata.get("cli", False):
            continue
        yield Flag(
            owner=cls,
            name=f.name,
            flag=f.metadata.get("flag") or "--" + f.name.replace("_", "-"),
            aliases=tuple(f.metadata.get("aliases") or ()),
            help=f.metadata.get("help", ""),
            default=default_of(f),
            parse=_parser_for(f),
            choices=f.metadata.get("choices"),
            metavar=f.metadata.get("metavar"),
            repeat=bool(f.metadata.get("repeat")),
        )


def known_fields(cls: type) -> set[str]:
    """Names of a dataclass's fields."""
    return {f.name for f in dataclasses.fields(cls)}


def refuse_unknown(data: dict[str, Any], cls: type, where: str) -> None:
    """Name the first key of `data` that is not a field of `cls`."""
    known = known_fields(cls)
    unknown = sorted(set(data) - known)
    if unknown:
        raise ParamError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(sorted(known))})")


def whole(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> None:
    """Refuse a value that is not a whole number in [lo, hi]."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ParamError(f"{name} must be a whole number, got {value!r}")
    if lo is not None and value < lo:
        raise ParamError(f"{name} must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise ParamError(f"{name} must be <= {hi}, got {value}")


def number(
    name: str, value: Any, lo: float | None = None, hi: float | None = None, lo_open: bool = False
) -> None:
    """Refuse a value that is not a finite number in [lo, hi] ((lo, hi] with lo_open): no run can
    reach an infinite timeout or rate, and config.json is strict JSON (no NaN, no Infinity)."""
    if not isinstance(value, int | float) or isinstance(value, bool) or value != value:
        raise ParamError(f"{name} must be a number, got {value!r}")
    if value in (math.inf, -math.inf):
        raise ParamError(f"{name} must be a finite number, got {value!r}")
    if lo is not None and (value <= lo if lo_open else value < lo):
        raise ParamError(f"{name} must be {'>' if lo_open else '>='} {lo:g}, got {value:g}")
    if hi is not None and value > hi:
        raise ParamError(f"{name} must be <= {hi:g}, got {value:g}")
