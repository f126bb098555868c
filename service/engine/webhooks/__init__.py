"""Webhooks (docs/webhooks.md): a tenant's subscriptions (subscriptions.py), the addresses a
delivery may reach (addresses.py), one signed attempt (sender.py) and the worker that sends every
tenant's deliveries at least once (worker.py). The deliveries themselves are written by the tenant
file's triggers, in the transaction of each change (store/schema.py ``_V_WEBHOOKS``)."""

from mnemosyne.engine.webhooks.subscriptions import Subscriptions
from mnemosyne.engine.webhooks.worker import DeliveryWorker

__all__ = ["DeliveryWorker", "Subscriptions"]
