"""Nothing of one tenant is visible to another: by recall, by id, by list, by stats."""

from __future__ import annotations

import pytest

from mnemosyne.client import MemoryClient, NotFoundError


def test_two_tenants_see_only_their_own_memories(client: MemoryClient, tenant: str) -> None:
    a, b = tenant + "-a", tenant + "-b"
    a_id = client.retain(a, "Tenant A secret: the vault code is 1234").memory_id
    b_id = client.retain(b, "Tenant B note: lunch at noon").memory_id
    assert a_id == b_id == 1  # ids are per tenant: same number, different memories
    assert client.recall(b, "vault code secret 1234", k=10, mode="text") == []
    assert all("vault" not in h.memory.text for h in client.recall(b, "vault code secret 1234", k=10))
    assert [h.memory.id for h in client.recall(a, "vault code secret 1234", k=10)] == [a_id]
    assert client.get_memory(b, b_id).text == "Tenant B note: lunch at noon"
    assert [m.text for m in client.list_memories(b).memories] == ["Tenant B note: lunch at noon"]
    with pytest.raises(NotFoundError):
        client.get_memory(b, 2)
    # The same text in both tenants is no duplicate across them.
    assert client.retain(b, "Tenant A secret: the vault code is 1234").status == "created"
    assert client.stats(a).memories == 1 and client.stats(b).memories == 2
    client.forget(b, b_id)
    assert client.get_memory(a, a_id).text.startswith("Tenant A secret")
