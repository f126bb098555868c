"""The server's refusals of a server address a caller gives (a command's ``--target``, a member's
address in a member list: ``serve --members``, ``rebalance``, ChangeMembers): CONFIG_INVALID, by
the check the Python client shares (host/targets.py)."""

from __future__ import annotations

from collections.abc import Mapping

from mnemosyne.errors import InvalidArgument
from mnemosyne.host.targets import MEMBER_ADDRESS_INVALID, is_target, member_address_refusal, not_a_target


def check_target(target: str, flag: str = "--target (MNEMOSYNE_TARGET)") -> None:
    """Refuses (CONFIG_INVALID, naming ``flag``) a target that is none of ``TARGET_FORMS``."""
    if not is_target(target):
        raise InvalidArgument(not_a_target(target, flag), reason="CONFIG_INVALID")


def check_member_addresses(addresses: Mapping[str, str], source: str) -> None:
    """Every member's address of a member list (id -> address) is a target: the first that is not
    is refused naming ``source`` and the member (problem MEMBER_ADDRESS_INVALID, as the list's own
    refusal of an address that is not printable ASCII)."""
    refusal = member_address_refusal(addresses, source)
    if refusal is not None:
        raise InvalidArgument(refusal, reason="CONFIG_INVALID", metadata={"problem": MEMBER_ADDRESS_INVALID})
