"""What Hydra's and OmegaConf's errors mean for the user, in one line.

``bnexp train`` shows every error as one ``bnexp: error: ...`` line (:func:`bnexp.cli.main`).
Errors of the command line itself come from here: :func:`parse_overrides` reads the overrides
before Hydra does (a value the shell split at a space gets the hint to quote it; a key given twice
is refused, naming both values), and :func:`explain` words the errors of Hydra's composition (a
wrong type, an unknown key or group option) with the key, the value given and what the key accepts
(its type from the schema, its range from :mod:`bnexp.config.checks`).
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
import typing
from typing import Any

from bnexp.errors import UserError

QUOTE_HINT = ("a value with spaces or any of ()[]{},=' \" must be quoted inside the override, and the override "
              "as one argument, e.g. 'data.root=\"/tmp/my data\"'")
LAST_WINS_ENV = "BNEXP_LAST_OVERRIDE_WINS"  # =1: a later override of a key replaces an earlier one


def parse_overrides(args: list[str]) -> list:
    """Parse command-line overrides one by one with Hydra's grammar and refuse a key given twice.

    Args:
        args: the overrides (after :func:`bnexp.config.schema.quote_bn_overrides`); flags are skipped.

    Returns:
        Hydra's ``Override`` objects.

    Raises:
        UserError: an override Hydra cannot read (naming it, with the quoting hint), or a key given
            twice (naming both values), unless ``$BNEXP_LAST_OVERRIDE_WINS=1`` (the sweep scripts set
            it: their extra overrides come last and win), which prints a note instead.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    lines = [a for a in args if not a.startswith("-")]
    out, seen = [], {}
    for i, line in enumerate(lines):
        try:
            o = parser.parse_overrides([line])[0]
        except Exception as exc:  # OverrideParseException, or a ValueError for odd input such as '=3'
            raise UserError(_parse_message(line, lines[i - 1] if i else None, exc)) from None
        key = (o.key_or_group, o.package)
        if key in seen:
            first = seen[key].input_line
            if os.environ.get(LAST_WINS_ENV) != "1":
                raise UserError(f"{o.key_or_group} is given twice, as {first} and as {line}: give each key once "
                                f"(with -m, a,b sweeps over several values).")
            _note(f"{line} replaces the earlier {first} (${LAST_WINS_ENV}=1: the last override of a key wins)")
        seen[key] = o
        out.append(o)
    return out


def _note(text: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(f"bnexp: note: {text}", highlight=False, soft_wrap=True, markup=False)


#: the keys whose value bnexp itself expands ``~`` in (:func:`bnexp.nets.datasets.resolve_root`); Hydra's run and sweep
#: folders are not among them (a quoted ``"~/x"`` there makes a folder named ``~``)
TILDE_EXPANDED = ("data.root",)


def _parse_message(line: str, previous: str | None, exc: Exception) -> str:
    """One line for an override Hydra's grammar cannot read: what is wrong and how to write it; never the name of
    Hydra's (ANTLR's) exception class."""
    lines = [x for x in str(exc).splitlines() if x.strip() and not x.startswith(("See https", "Error parsing"))]
    reason = (lines[0] if lines else str(exc)).strip()
    if m := re.match(r"(\w+(?:Exception|Error)): ?(.*)$", reason):  # e.g. ANTLR's LexerNoViableAltException
        reason = m.group(2).strip()
        caret = lines[1].find("^") - len(m.group(1)) - 2 if len(lines) > 1 and "^" in lines[1] else -1
        if reason == line.strip() or not reason:  # the lexer met a character no token starts with
            reason = f"{line[caret]!r} cannot stand unquoted in a value" if 0 <= caret < len(line) else ""
    key, eq, value = line.partition("=")
    key = key.lstrip("+")
    if eq and any(v.strip().lstrip("[").startswith("~") for v in value.split(",")):
        return _tilde_message(line, key, value)
    if "=" not in line and previous is not None and "=" in previous:
        return (f"cannot read the override {line!r}: it is not key=value. If it belongs to the previous value "
                f"({previous}), the shell split that value at a space: {QUOTE_HINT}.")
    if "=" not in line and not line.startswith("~"):
        return f"cannot read the override {line!r}: it is not key=value (e.g. lr=0.1, model=cnn)."
    if line.count("'") % 2 or line.count('"') % 2:
        return f"cannot read the override {line!r}: a quote is not closed ({QUOTE_HINT})."
    return f"cannot read the override {line!r}{f' ({reason})' if reason else ''}: {QUOTE_HINT}."


def _tilde_message(line: str, key: str, value: str) -> str:
    """``data.root=~/data``: bash expands ``~`` only at the start of a word, not after ``=``, and Hydra's grammar
    reads no unquoted ``~`` in a value; ``$HOME`` is expanded by the shell (and, for the keys of
    :data:`TILDE_EXPANDED`, a quoted ``"~/..."`` by bnexp)."""
    home = f"{key}=" + ",".join("$HOME" + v[1:] if v in ("~", "~/") or v.startswith("~/") else v
                                for v in value.split(","))
    fix = f"write {home}, which the shell expands" if "$HOME" in home else "write the full path"
    if key in TILDE_EXPANDED and "," not in value and "$HOME" in home:
        fix += f", or quote it, '{key}=\"{value}\"' (bnexp expands ~ in {key})"
    return (f"cannot read the override {line!r}: the shell does not expand ~ after = (only at the start of a "
            f"word), and an unquoted ~ is not allowed in a value: {fix}.")


def type_words(tp: Any) -> str:
    """What values of the annotation ``tp`` look like, in words (``List[int]`` -> ``a list of integers``)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union and type(None) in args:
        inner = [a for a in args if a is not type(None)]
        return f"{type_words(inner[0])} or null" if len(inner) == 1 else "a value or null"
    if origin in (list, typing.List):
        item = {int: "integers", float: "numbers", str: "texts", bool: "booleans"}.get(args[0] if args else Any,
                                                                                       "values")
        return f"a list of {item}, e.g. [1, 2]"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(m.name for m in tp)
    if dataclasses.is_dataclass(tp):
        return f"a group of keys (set them one by one, e.g. {dataclasses.fields(tp)[0].name}=...)"
    return {bool: "true or false", int: "an integer", float: "a number", str: "text"}.get(tp, "a value")


def _field(schema: Any, key: Any) -> dataclasses.Field | None:
    if dataclasses.is_dataclass(schema):
        return next((f for f in dataclasses.fields(schema) if f.name == key), None)
    return None


def _resolve_annotation(schema: type, f: dataclasses.Field) -> Any:
    try:
        return typing.get_type_hints(schema)[f.name]
    except Exception:
        return f.type


def _value_error(exc, override: str | None) -> str:
    """A wrong type or value: name the key, the value given and what the key takes."""
    key = exc.full_key or str(exc.key)
    given = override or f"{key}={exc.value!r}"
    schema = exc.object_type
    f = _field(schema, exc.key)
    if f is not None:
        tp = _resolve_annotation(schema, f)
        check = f.metadata.get("check")
    else:  # an element of a list: the list's annotation
        tp, check = getattr(exc, "ref_type", None), None
        key = re.sub(r"\[\d+\]$", "", key)
    words = type_words(tp) if tp is not None else None
    msg = str(getattr(exc, "msg", "") or exc).splitlines()[0]
    if words is None or words == "a value":
        return f"invalid value in {given}: {msg}."
    extra = f" ({check.allowed})" if check is not None else ""
    hint = ""
    value = exc.value
    if tp in (int, typing.Optional[int]) and isinstance(value, float) and value.is_integer():
        written = given.split("=", 1)[1] if "=" in given else str(value)
        hint = f"; {written} is a float ({value!r}) in Hydra's syntax: write {key}={int(value)}"
    elif isinstance(value, str) and words.startswith("a list") and "," in value:
        hint = f"; write a list in brackets: {key}=[{value}]"
    return f"invalid value in {given}: {key} takes {words}{extra}{hint}."


def explain(exc: BaseException, typed: list[str] | None = None) -> str | None:
    """One line for an error of Hydra's composition or of OmegaConf, or None when ``exc`` is none
    of these (an internal error, which keeps its traceback).

    Args:
        exc: the error.
        typed: the command line as the user typed it (before :func:`bnexp.config.schema.hydra_overrides`
            added a ``+`` to ``experiment=NAME`` and quoted ``bn`` values), to name an override as typed;
            None: an override is named as Hydra saw it.
    """
    from hydra.errors import (ConfigCompositionException, HydraException, MissingConfigException,
                              OverrideParseException)
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

    from bnexp.config.schema import unknown_key_message

    if isinstance(exc, UserError):
        return str(exc)
    text = str(exc)
    first = text.splitlines()[0] if text else type(exc).__name__
    cause = exc.__cause__ if isinstance(exc.__cause__, OmegaConfBaseException) else None
    override = (m.group(1) if (m := re.match(r"Error merging override (.+)$", first)) else None)
    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and exc.options is not None:
        group, _, option = str(exc.missing_cfg_file).rpartition("/")
        plus = "+" if group == "experiment" else ""
        line = _typed_override(typed, group, option) or f"{plus}{group}={option}"
        return (f"{line}: the config group {group} has no option {option}; use one of "
                f"{', '.join(exc.options)}.")
    err = cause if cause is not None else exc
    if isinstance(err, (ConfigAttributeError, ConfigKeyError)) and getattr(err, "full_key", None):
        m = re.match(r"Could not override '([^']+)'", first)
        line = next((a for a in (override,) if a), None)
        return unknown_key_message(err.full_key, err.object_type, line or (m.group(1) if m else None))
    if isinstance(err, ValidationError) and getattr(err, "full_key", None):
        return _value_error(err, override)
    if m := re.match(r"Could not override '([^']+)'\. No match in the defaults list", first):
        line = re.search(r"use \+(\S+)", text)
        return (f"{m.group(1)} is not a group of the defaults list: add it with a +, as in "
                f"+{line.group(1) if line else m.group(1) + '=...'}.")
    if m := re.match(r"Could not append to config\. An item is already at '([^']+)'", first):
        line = re.search(r"remove \+ prefix: '([^']+)'", text)
        return (f"{m.group(1)} exists already: set it without the + (a + adds a new key), as in "
                f"{line.group(1) if line else m.group(1) + '=VALUE'}.")
    if override and override.startswith("~") and "does not support deletion" in str(cause):
        return f"cannot delete {override[1:]}: it is a key of the schema, which every run needs (drop {override})."
    if isinstance(exc, ConfigCompositionException) and first.startswith("Ambiguous value for argument"):
        arg = re.search(r"'(.+)'", first).group(1)
        key, _, value = arg.partition("=")
        return (f"{arg} gives several values: add -m to sweep over them (bnexp train -m {arg}), write "
                f"{key}=[{value}] for one list value, or quote it ({key}='{value}') for one text value.")
    if isinstance(exc, (HydraException, OmegaConfBaseException, OverrideParseException)):
        lines = [ln.strip() for ln in text.splitlines()
                 if ln.strip() and not ln.strip().startswith(("full_key:", "object_type=", "reference_type=",
                                                              "See https", "Config search path", "provider="))]
        if cause is not None:
            lines.append(str(getattr(cause, "msg", cause)).splitlines()[0])
        return " ".join(lines).rstrip(".") + "."
    return None


def _typed_override(typed: list[str] | None, group: str, option: str) -> str | None:
    """The override of ``typed`` that chose ``option`` of the config group ``group`` (``experiment=bn_x6``, with or
    without a ``+``; a sweep ``experiment=bn_x5,bn_x6``), or None."""
    for a in typed or []:
        key, eq, value = a.partition("=")
        if eq and not a.startswith("-") and key.lstrip("+").split("@")[0] == group and option in (
                v.strip().strip("'\"") for v in value.strip("[]").split(",")):
            return a
    return None


def dashed_key_hint(args: list[str], hydra_flags: tuple[str, ...]) -> str | None:
    """For a config key written as a flag (``--lr 0.1``, ``--trainer.max_steps=5``): the spelling that works,
    ``config values are written key=value, without dashes: lr=0.1``; None when no argument is one (a
    Hydra flag, or ``--name`` whose name is no config key)."""
    import dataclasses

    from bnexp.config.schema import Config

    fields = {f.name for f in dataclasses.fields(Config)}
    for i, a in enumerate(args):
        key = a[2:].split("=")[0]
        if a.startswith("--") and key not in hydra_flags and key.split(".")[0] in fields:
            value = a.split("=", 1)[1] if "=" in a else (args[i + 1] if i + 1 < len(args) else "VALUE")
            return (f"config values are written key=value, without dashes: {key}={value} "
                    "(bnexp train --help lists the keys)")
    return None
