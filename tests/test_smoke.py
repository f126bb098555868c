from mnemosyne.client import MemoryClient


def test_retain_then_recall_round_trip(client: MemoryClient, tenant: str) -> None:
    result = client.retain(tenant, "The customer requested a refund, ticket number RF-88213")
    assert result.status == "created" and result.memory_id > 0
    hits = client.recall(tenant, "refund ticket", k=3)
    assert [h.memory.id for h in hits] == [result.memory_id]
