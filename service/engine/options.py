"""A configuration field that is also a setting of ``mnemosyne serve``: its flag ``--NAME``, its
environment variable ``MNEMOSYNE_NAME``, its default and its help are written once, on the field
(``option``). The command line builds its flags, their help and the configuration from these
(cli/flags.py); docs/operations.md's table is checked against them (tests/test_operations_docs.py).

A field's type says what its flag takes: ``int`` and ``float`` a number (the one rule for numbers
given as text, engine/limits.py), ``bool`` a switch (the flag, or the variable set to ``1``, turns
the field from its default), ``tuple[str, ...]`` a repeatable flag (the variable: comma-separated),
``Path`` a file or directory, ``str`` text or one of ``choices``.
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields
from typing import Any, TypeVar

from mnemosyne.errors import InvalidArgument

T = TypeVar("T")

_KEY = "mnemosyne.option"
# The largest number a setting takes unless it says less: a count past 2**31 - 1 or a number of
# seconds past 1e9 (31 years) is a typo, not a setting.
LARGEST_COUNT = 2**31 - 1
LARGEST_NUMBER = 1e9


@dataclass(frozen=True)
class Option:
    """How a configuration field is set from outside the process."""

    help: str
    # The flag is --NAME, the variable MNEMOSYNE_NAME (upper case, "-" as "_"); "" = the field's name.
    name: str = ""
    # A variable and no flag: a document or a switch a deployment sets, not a person at a prompt.
    variable_only: bool = False
    # The smallest number the flag takes: 1 where 0 would mean nothing (a limit no call passes, a
    # pool of no threads); a field that takes 0 says in its help what 0 means.
    minimum: float = 0
    # The largest number the flag takes; None = LARGEST_COUNT, or LARGEST_NUMBER for a float.
    maximum: float | None = None
    # The words the flag takes, in any case; the field keeps them in its default's case.
    choices: tuple[str, ...] = ()
    # What None (no value) means, for --help and the docs.
    unset: str = "none"
    # The flag's default for a field the configuration requires (it has no default of its own).
    command_line_default: str | None = None
    # False: the parser leaves the variable to the component that reads it, so that a mistake in it
    # is reported where it matters (MNEMOSYNE_LLM_*: only when the openai extractor is chosen).
    parser_reads_variable: bool = True

    def bounds(self, kind: type) -> tuple[float, float]:
        """The smallest and the largest number the setting takes, for a field of type ``kind``."""
        if kind is int:
            return int(self.minimum), LARGEST_COUNT if self.maximum is None else int(self.maximum)
        return self.minimum, LARGEST_NUMBER if self.maximum is None else self.maximum

    def named(self, field_name: str) -> str:
        """The setting's name: ``--NAME`` without the dashes."""
        return self.name or field_name.replace("_", "-")

    def variable(self, field_name: str) -> str:
        return "MNEMOSYNE_" + self.named(field_name).replace("-", "_").upper()


def option(default: T, help: str, **how: Any) -> T:
    """A dataclass field with this ``default`` that is a setting of ``serve`` (``how``: the other
    fields of ``Option``)."""
    given: T = field(default=default, metadata={_KEY: Option(help, **how)})
    return given


def required_option(help: str, **how: Any) -> dict[str, Option]:
    """The metadata of a field the configuration requires (give ``command_line_default``):
    ``field(metadata=required_option(...))``."""
    return {_KEY: Option(help, **how)}


def option_of(spec: Field[Any]) -> Option | None:
    """The field's setting, or None for a field set otherwise (or not at all) by ``serve``."""
    found: Option | None = spec.metadata.get(_KEY)
    return found


def check_bounds(config: Any) -> None:
    """Refuse (CONFIG_INVALID) a number of ``config`` outside its setting's bounds, naming the
    flag: the command line refuses it before (cli/flags.py); this holds for a configuration
    made in code."""
    for spec in fields(config):
        described, value = option_of(spec), getattr(config, spec.name)
        if described is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        smallest, largest = described.bounds(type(value))
        if not smallest <= value <= largest:
            raise InvalidArgument(
                f"--{described.named(spec.name)} must be from {smallest:,} to {largest:,}", reason="CONFIG_INVALID"
            )
