"""One grammar for `KEY=V[:KEY=V...]` options over a frozen dataclass: strategy variants
(`ps:shards=4:pull=serial`, runmodel.strategy) and incast curves (`rto_min_ms=1:cc=reno`,
runmodel.incast).

The dataclass's fields are the keys and their types read the values, so an option cannot exist
without its field; a variant is named by its non-default options in field order (whatever order
they were typed in), and its folder in a run is that name with ':' -> '_' and '=' -> '-'. Names
and folders are what earlier runs are stored under, so this spelling must stay as it is.
What values may be together is each owner's validate(), not the grammar's.

An owner subclasses Variant and sets GRAMMAR; it then has `options`, `name` and `folder`.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, fields, is_dataclass
from typing import Any, ClassVar, TypeVar, get_type_hints

from runmodel.params import ParamError

T = TypeVar("T")

# how a value's text is read, by the field's type (None allowed: `float | None` reads as float)
_READERS: dict[type, Callable[[str], Any]] = {int: int, float: float, str: str}


def folder_name(name: str) -> str:
    """A variant's folder in a run: `ps:shards=2:cc=reno` -> `ps_shards-2_cc-reno`."""
    return name.replace(":", "_").replace("=", "-")


def _reader(hint: Any) -> Callable[[str], Any]:
    """The reader of a field's type (`int`, `float | None`, ...)."""
    if isinstance(hint, types.UnionType):
        args = [a for a in hint.__args__ if a is not type(None)]
        hint = args[0] if len(args) == 1 else hint
    if hint not in _READERS:
        raise TypeError(f"option grammar: no reader for a field of type {hint!r}")
    return _READERS[hint]


@dataclass(frozen=True)
class OptionGrammar:
    """How one family of variants is spelled: which field (if any) leads by position, what a
    variant with no options is called, and what a refusal names (the field of the config and an
    example)."""

    what: str  # the config field the text came from, first in every message: "strategies", "lines"
    example: str  # shown with the known options when a key is unknown: "ps:shards=4"
    lead: str | None = None  # a field given by position before the options (a strategy's kind)
    empty: str = ""  # the name of a variant with no lead and no options ("base")

    def keys(self, owner: type) -> list[Field[Any]]:
        """The fields spelled KEY=V: every field but the lead, in declaration order."""
        if not is_dataclass(owner):
            raise TypeError(f"option grammar: {owner!r} is not a dataclass")
        return [f for f in fields(owner) if f.name != self.lead]

    def values(self, owner: type, text: str) -> dict[str, Any]:
        """The field values `text` spells, read by the fields' types; an unknown key or a value
        its type cannot read is refused in one line naming the text and the key."""
        text = text.strip()
        parts = [p.strip() for p in text.split(":")]
        values: dict[str, Any] = {}
        if self.lead is not None:
            values[self.lead] = parts.pop(0)
        elif parts in ([""], [self.empty]):
            return values
        known = [f.name for f in self.keys(owner)]
        hints = get_type_hints(owner)
        for part in parts:
            key, sep, raw = part.partition("=")
            key, raw = key.strip(), raw.strip()
            if not sep or key not in known:
                raise ParamError(
                    f"{self.what}: {text!r}: unknown option {key!r} "
                    f"(options: {', '.join(known)}; e.g. {self.example})"
                )
            try:
                values[key] = _reader(hints[key])(raw)
            except ValueError as exc:
                raise ParamError(f"{self.what}: {text!r}: {key} needs a number, got {raw!r}") from exc
        return values

    def parse(self, owner: type[T], text: str) -> T:
        """An `owner` from its text (the owner's own validate() is for the caller to run)."""
        return owner(**self.values(owner, text))

    def options(self, variant: Any) -> tuple[tuple[str, Any], ...]:
        """The variant's non-default options, in field order: (("shards", 2), ("cc", "reno"))."""
        out = []
        for f in self.keys(type(variant)):
            value = getattr(variant, f.name)
            if f.default is MISSING or value != f.default:
                out.append((f.name, value))
        return tuple(out)

    def name(self, variant: Any) -> str:
        """The canonical name: the lead, then the non-default options in field order
        (`ps:shards=4:rto_min_ms=1`); `empty` where there is neither."""
        parts = [] if self.lead is None else [str(getattr(variant, self.lead))]
        parts += [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.options(variant)]
        return ":".join(parts) or self.empty

    def folder(self, variant: Any) -> str:
        """The variant's folder in a run (folder_name of its name)."""
        return folder_name(self.name(variant))


class Variant:
    """A frozen dataclass spelled by its class's GRAMMAR: its options, name and folder."""

    GRAMMAR: ClassVar[OptionGrammar]

    @property
    def options(self) -> tuple[tuple[str, Any], ...]:
        """The options this variant sets, in field order: (("rto_min_ms", 1.0), ("cc", "reno"))."""
        return self.GRAMMAR.options(self)

    @property
    def name(self) -> str:
        """The canonical name: `ps:shards=4:rto_min_ms=1`, `rto_min_ms=1:cc=reno`, `base`."""
        return self.GRAMMAR.name(self)

    @property
    def folder(self) -> str:
        """The variant's folder in a run: `ps_shards-4_rto_min_ms-1`, `rto_min_ms-1_cc-reno`."""
        return self.GRAMMAR.folder(self)
