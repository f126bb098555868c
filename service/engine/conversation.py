"""Conversations: a list of {role, content} messages retained as ONE operation.

Design (documented in docs/dedup.md): a conversation becomes ONE memory whose body is its
transcript, one ``role: content`` line per message in order. So:

* one idempotency unit: a request id covers the whole conversation (method
  ``retain_conversation``, payload hash over the transcript, scope and metadata);
* one fingerprint: scope + normalised transcript. The same conversation submitted again under any
  request id is an exact duplicate (DUPLICATE, the first memory's id) and costs no model call,
  which is what drill 3 of the specification (§9.6, docs/seed-mapping.md) counts ("2 duplicates" for three submissions);
* one extraction call over the transcript (the rules extractor reads each line without its
  speaker prefix, so "user: ticket RF-88213 status: refunded" yields the status triple).

Roles are short labels without ':' or line breaks, so the transcript reads back unambiguously.
A message may name who spoke beside its role (``name``, as an OpenAI chat message does): its line
reads ``role (name): content``. The memory's speaker is the conversation's (``speaker``), or
else the one name its messages share (case aside); a conversation between several named people
has none, and their names are in its text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from mnemosyne.engine import limits as check
from mnemosyne.engine.limits import Limits
from mnemosyne.engine.types import Message, RetainItem, ThreadRef
from mnemosyne.errors import InvalidArgument

MAX_MESSAGES = 1_000
ROLE_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}")


def transcript(messages: Sequence[Message]) -> str:
    """The canonical body of a conversation: ``role: content`` (``role (name): content`` for a
    named message) per message, newline-separated."""
    return "\n".join(
        f"{m.role.strip().lower()}{f' ({m.name.strip()})' if m.name.strip() else ''}: {m.content.strip()}"
        for m in messages
    )


def conversation_speaker(messages: Sequence[Message], speaker: str | None) -> str | None:
    """The conversation's own speaker, or else the one name all its named messages share (the
    first one's spelling), or None."""
    if speaker and speaker.strip():
        return speaker
    names = [m.name.strip() for m in messages if m.name.strip()]
    return names[0] if names and len({n.casefold() for n in names}) == 1 else None


def validate_messages(messages: Sequence[Message], limits: Limits) -> None:
    if not messages:
        raise InvalidArgument("messages is empty; send at least one {role, content}", reason="MESSAGES_EMPTY")
    if len(messages) > MAX_MESSAGES:
        raise InvalidArgument(
            f"the conversation has {len(messages)} messages; the limit is {MAX_MESSAGES}",
            reason="MESSAGES_TOO_MANY",
        )
    for position, message in enumerate(messages):
        if not ROLE_PATTERN.fullmatch(message.role.strip()):
            raise InvalidArgument(
                f"messages[{position}].role {message.role[:40]!r} is not valid: use 1-64 letters, digits, "
                "spaces, '.', '_' or '-' (e.g. 'user', 'assistant')",
                reason="MESSAGE_ROLE_INVALID",
            )
        if not message.content or not message.content.strip():
            raise InvalidArgument(f"messages[{position}].content is empty", reason="MESSAGE_EMPTY")
        check.validate_speaker(message.name, field=f"messages[{position}].name")


def conversation_item(
    messages: Sequence[Message],
    scope: str,
    metadata: Mapping[str, str],
    limits: Limits,
    *,
    occurred_at: int | None = None,
    thread: ThreadRef | None = None,
    speaker: str | None = None,
) -> RetainItem:
    """Validate a conversation's messages and turn them into the one item it is retained as (whose
    text, the transcript, is validated with every item's on the write path, as are its time and
    thread, and its speaker: all the whole conversation's, ``conversation_speaker``)."""
    validate_messages(messages, limits)
    return RetainItem(
        text=transcript(messages),
        scope=scope,
        metadata=dict(metadata),
        occurred_at=occurred_at,
        thread=thread,
        speaker=conversation_speaker(messages, speaker),
    )
