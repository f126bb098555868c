"""Flags generated from the configuration's options (engine/options.py), and the number types every
command's flags parse with.

Each field made with ``option`` becomes a flag ``--NAME`` whose default is its variable
``MNEMOSYNE_NAME`` when that is set (the flag wins over both), else the field's own default;
``--help`` names the variable and shows the default. ``configured`` builds the configuration back
from the parsed flags (and the variables no flag carries)."""

from __future__ import annotations

import argparse
import os
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar

from mnemosyne.engine.limits import parse_integer, parse_number
from mnemosyne.engine.options import LARGEST_COUNT, LARGEST_NUMBER, Option, option_of
from mnemosyne.errors import InvalidArgument

T = TypeVar("T")


def number_flag(parse: Callable[..., T], minimum: float, maximum: float) -> Callable[[str], T]:
    """An argparse type: a number by the one rule for numbers given as text (engine/limits.py
    ``parse_integer`` or ``parse_number``: ASCII digits only), from ``minimum`` to ``maximum``."""

    def typed(text: str) -> T:
        try:
            return parse(text, field="the value", minimum=minimum, maximum=maximum)
        except InvalidArgument as exc:
            raise argparse.ArgumentTypeError(exc.message) from None

    return typed


PORT = number_flag(parse_integer, 0, 65_535)
COUNT = number_flag(parse_integer, 0, LARGEST_COUNT)
POSITIVE = number_flag(parse_integer, 1, LARGEST_COUNT)
NUMBER = number_flag(parse_number, 0.0, LARGEST_NUMBER)


class _Words(tuple[str, ...]):
    """A flag's choices, taken in any case (argparse asks ``in``; --help lists them as given)."""

    def __contains__(self, value: object) -> bool:
        return isinstance(value, str) and tuple.__contains__(self, value.lower())


@dataclass(frozen=True)
class Setting:
    """One option of a configuration class, as the command line sees it. ``kind`` is what its
    field holds besides None: int, float, bool, str, Path, or tuple (of str)."""

    owner: type
    field: Field[Any]
    option: Option
    kind: type

    @property
    def flag(self) -> str:
        return "--" + self.option.named(self.field.name)

    @property
    def variable(self) -> str:
        return self.option.variable(self.field.name)

    @property
    def dest(self) -> str:
        return self.option.named(self.field.name).replace("-", "_")

    @property
    def written_default(self) -> str | None:
        """The default as the flag's text (None: no value)."""
        default = self.field.default
        if default is MISSING:
            return self.option.command_line_default
        if default is None or default == () or self.kind is bool:  # a switch is off, or on by its variable
            return None
        if isinstance(default, float):
            return f"{default:g}"
        return str(default).lower() if self.option.choices else str(default)

    @property
    def shown_default(self) -> str:
        return self.written_default or self.option.unset


def settings(cls: type) -> Iterator[Setting]:
    """The options of a configuration class and of the configuration classes it nests, in order."""
    hints = typing.get_type_hints(cls)
    for spec in fields(cls):
        described = option_of(spec)
        if described is not None:
            yield Setting(cls, spec, described, _kind(hints[spec.name]))
        elif _configurable(hints[spec.name]):
            yield from settings(hints[spec.name])


def _kind(hint: Any) -> type:
    if typing.get_origin(hint) is tuple:
        return tuple
    (kind,) = [arg for arg in typing.get_args(hint) if arg is not type(None)] or [hint]
    return typing.cast(type, kind)


def _configurable(hint: Any) -> bool:
    """A nested configuration class with options of its own."""
    return isinstance(hint, type) and is_dataclass(hint) and any(option_of(spec) for spec in fields(hint))


def add_flags(parser: argparse.ArgumentParser, classes: Sequence[type], titles: Mapping[type, str]) -> None:
    """A flag per option of ``classes`` (and of the classes they nest), in a group per class titled
    by ``titles``, the groups in the order of ``titles``."""
    flags = [setting for cls in classes for setting in settings(cls) if not setting.option.variable_only]
    groups = {owner: parser.add_argument_group(title) for owner, title in titles.items()}
    for setting in flags:
        groups[setting.owner].add_argument(setting.flag, dest=setting.dest, **_argument(setting))


def _argument(setting: Setting) -> dict[str, Any]:
    """``add_argument``'s keywords for a setting's flag."""
    described = setting.option
    if setting.kind is bool:
        return {"action": "store_true", "default": _variable_text(setting) == "1", "help": _help(setting)}
    if setting.kind is tuple:
        return {"action": "append", "default": None, "help": _help(setting)}
    argument: dict[str, Any] = {"default": _flag_default(setting), "help": _help(setting)}
    if setting.kind in (int, float):
        smallest, largest = described.bounds(setting.kind)
        argument["type"] = number_flag(parse_integer if setting.kind is int else parse_number, smallest, largest)
    if described.choices:
        argument["choices"] = _Words(described.choices)
        # argparse checks choices only on the command line: its variable's word (the default) is
        # checked by the type, which it applies to both.
        argument["type"] = _one_of(described.choices)
    if "type" in argument:
        argument["type"] = _naming_the_variable(argument["type"])
    return argument


class _VariableText(str):
    """A flag's default taken from its variable. argparse hands its type this very object (only
    when the flag is not given), so a refusal can name the variable: "argument --max-k: ... 'abc'
    is not" sent whoever set MNEMOSYNE_MAX_K=abc looking for a flag they never gave."""

    variable = ""


def _naming_the_variable(typed: Callable[[str], T]) -> Callable[[str], T]:
    def checked(text: str) -> T:
        try:
            return typed(text)
        except argparse.ArgumentTypeError as exc:
            if not isinstance(text, _VariableText):
                raise
            raise argparse.ArgumentTypeError(
                f"{exc} (the value of the variable {text.variable}: correct or unset it, or give the flag)"
            ) from None

    return checked


def _one_of(words: tuple[str, ...]) -> Callable[[str], str]:
    def word(text: str) -> str:
        if text.lower() not in words:
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(words)}")
        return text

    return word


def _variable_text(setting: Setting) -> str | None:
    return os.environ.get(setting.variable) if setting.option.parser_reads_variable else None


def _flag_default(setting: Setting) -> str | None:
    """The variable's text when it is set (a number's when it is not empty, as an empty value
    of a chart's), else the field's default; argparse parses a text default as it parses the flag."""
    text = _variable_text(setting)
    if text is not None and (text or setting.kind not in (int, float)):
        given = _VariableText(text)
        given.variable = setting.variable
        return given
    return setting.written_default


def _help(setting: Setting) -> str:
    if setting.kind is bool:
        where = f"{setting.variable}=1"
    elif setting.kind is tuple:
        where = f"repeat; {setting.variable}: comma-separated; default: {setting.shown_default}"
    else:
        where = f"{setting.variable}; default: {setting.shown_default}"
    return f"{setting.option.help} ({where})".replace("%", "%%")


def variables_only(cls: type) -> list[str]:
    """A line per option of ``cls`` that is a variable and no flag, for --help."""
    return [
        f"  {s.variable}: {s.option.help} (default: {s.shown_default})" for s in settings(cls) if s.option.variable_only
    ]


def configured(cls: type[T], args: argparse.Namespace, **given: Any) -> T:
    """``cls`` made from parsed flags (and the variables no flag carries), nested configuration
    classes too; ``given``: its fields made otherwise. A field without an option keeps its default."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for spec in fields(typing.cast(Any, cls)):
        described = option_of(spec)
        if spec.name in given:
            continue
        if described is not None:
            values[spec.name] = _value(Setting(cls, spec, described, _kind(hints[spec.name])), args)
        elif _configurable(hints[spec.name]):
            values[spec.name] = configured(hints[spec.name], args)
    return cls(**values, **given)


def _value(setting: Setting, args: argparse.Namespace) -> Any:
    """The field's value from its flag (or its variable, for one that has no flag)."""
    default = setting.field.default
    if setting.option.variable_only:
        text = os.environ.get(setting.variable)
        if setting.kind is bool:
            return (text == "1") != default
        return default if text is None else text
    value = getattr(args, setting.dest)
    if setting.kind is bool:  # the flag turns the field from its default
        return value != default
    if setting.kind is tuple:  # the flag's values, else the variable's (the flag wins)
        if value is not None:
            return tuple(value)
        return tuple(word.strip() for word in os.environ.get(setting.variable, "").split(",") if word.strip())
    if setting.kind is Path:
        return Path(value) if value or default is MISSING else None
    if setting.option.choices and value is not None:
        return value.upper() if str(default).isupper() else value.lower()
    return value
