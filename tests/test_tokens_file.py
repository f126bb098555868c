"""The tokens file is checked against its schema at start: a mistake in it never widens what a
token reaches, and a malformed file stops the server with the file, the entry and the rule."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mnemosyne.client import MemoryClient, PermissionDeniedError
from mnemosyne.errors import PermissionDenied
from mnemosyne.transport.auth import TokensFileError, hash_token, parse_tokens
from tests.support import SERVE, ServerProcess, serve_args

DIGEST = hash_token("a-token")
OTHER = hash_token("another-token")


def _doc(*entries: object) -> str:
    return json.dumps({"tokens": list(entries)})


def _entry(tenants: object, name: str = "svc", sha256: object = DIGEST) -> dict[str, object]:
    return {"name": name, "sha256": sha256, "tenants": tenants}


BROKEN = {
    # The privilege escalation: a string was read as its characters ("*" among them = admin).
    "tenants a string": (_doc(_entry("acme")), "tenants must be a list"),
    "tenants a pattern string": (_doc(_entry("team-*")), "tenants must be a list"),
    "a pattern in the list": (_doc(_entry(["team-*"])), "not a tenant id"),
    "star beside a tenant": (_doc(_entry(["*", "acme"])), '"*" must be the only element'),
    "star twice": (_doc(_entry(["*", "*"])), '"*" must be the only element'),
    "empty tenants": (_doc(_entry([])), "tenants is empty"),
    "an invalid tenant id": (_doc(_entry(["Acme"])), "not a tenant id"),
    "a path as tenant": (_doc(_entry(["../acme"])), "not a tenant id"),
    "a number as tenant": (_doc(_entry([7])), "not a tenant id"),
    "null tenants": (_doc(_entry(None)), "tenants must be a list"),
    "an object as tenants": (_doc(_entry({"acme": True})), "tenants must be a list"),
    "a tenant twice": (_doc(_entry(["acme", "acme"])), "lists a tenant twice"),
    "an unknown key": (_doc({**_entry(["acme"]), "admin": True}), "unknown key"),
    "a misspelt key": (_doc({"name": "svc", "sha256": DIGEST, "tenant": ["acme"]}), "unknown key"),
    "no name": (_doc({"sha256": DIGEST, "tenants": ["acme"]}), "missing key"),
    "an empty name": (_doc(_entry(["acme"], name="")), "name must be"),
    "a short hash": (_doc(_entry(["acme"], sha256="abc")), "sha256 must be"),
    "a hash that is a number": (_doc(_entry(["acme"], sha256=12)), "sha256 must be"),
    "the same hash twice": (_doc(_entry(["a"]), _entry(["b"], name="svc2")), "same sha256"),
    "the same name twice": (_doc(_entry(["a"]), _entry(["b"], sha256=OTHER)), "same name"),
    "no tokens": (json.dumps({"tokens": []}), "non-empty list"),
    "tokens not a list": (json.dumps({"tokens": {"svc": DIGEST}}), "non-empty list"),
    "an extra top-level key": (json.dumps({"tokens": [_entry(["a"])], "admins": ["x"]}), 'exactly one key, "tokens"'),
    "a list at the top": (json.dumps([_entry(["a"])]), 'exactly one key, "tokens"'),
    "an entry that is a string": (_doc("svc:acme"), "must be an object"),
    "not JSON": ('{"tokens": [', "is not JSON"),
    # json.loads kept the last of two: an entry for ["acme"] edited to add "*" below became admin.
    "tenants given twice": (
        f'{{"tokens": [{{"name": "svc", "sha256": "{DIGEST}", "tenants": ["acme"], "tenants": ["*"]}}]}}',
        "'tenants' appears twice",
    ),
    # Nested past Python's reader: a RecursionError's traceback stopped the start.
    "nested past the reader": ("[" * 100_000 + "]" * 100_000, "nested too deep"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_tokens_document_is_refused_naming_the_entry_and_the_rule(case: str) -> None:
    text, rule = BROKEN[case]
    with pytest.raises(TokensFileError) as info:
        parse_tokens(text, source="tokens.json")
    assert info.value.reason == "TOKENS_FILE_INVALID"
    assert "tokens.json" in info.value.message and rule in info.value.message, info.value.message


def test_a_valid_document_grants_exactly_what_it_lists() -> None:
    principals = parse_tokens(
        _doc(_entry(["acme", "beta-2"]), _entry(["*"], name="ops", sha256=OTHER.upper())), source="t"
    )
    svc, ops = principals[DIGEST], principals[OTHER]
    assert svc.tenants == {"acme", "beta-2"} and not svc.is_admin
    assert ops.is_admin
    svc.check_tenant("acme")
    with pytest.raises(PermissionDenied):
        svc.check_tenant("a")  # never a character of "acme"


@pytest.mark.parametrize("via", ["file", "env"])
def test_the_server_does_not_start_with_a_string_for_tenants(tmp_path: Path, via: str) -> None:
    text = _doc(_entry(["acme"], name="ok", sha256=OTHER), _entry("team-*", name="team"))
    command = [*SERVE, *serve_args(tmp_path / "d")]
    env = dict(__import__("os").environ)
    if via == "file":
        (tmp_path / "tokens.json").write_text(text)
        command += ["--tokens-file", str(tmp_path / "tokens.json")]
        source = str(tmp_path / "tokens.json")
    else:
        env["MNEMOSYNE_TOKENS"] = text
        source = "MNEMOSYNE_TOKENS"
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 2, result.stderr
    assert (
        source in result.stderr and "tokens[1] ('team')" in result.stderr and "tenants must be a list" in result.stderr
    )
    assert "TOKENS_FILE_INVALID" in result.stderr
    assert not result.stdout  # it never said it was serving


def test_a_token_for_a_tenant_named_like_a_prefix_reaches_only_that_tenant(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(_doc(_entry(["team"], name="team")))
    server = ServerProcess(tmp_path / "data", args=["--tokens-file", str(tokens)]).start()
    try:
        with MemoryClient(server.target, token="a-token") as client:
            assert client.retain("team", "allowed").status == "created"
            for other in ("t", "team-a", "teamx", "e"):
                with pytest.raises(PermissionDeniedError):
                    client.retain(other, "not allowed")
            with pytest.raises(PermissionDeniedError) as info:
                client.list_tenants()
            assert info.value.reason == "ADMIN_REQUIRED"
    finally:
        server.stop()
