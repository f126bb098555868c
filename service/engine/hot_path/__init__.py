"""The hot path: asynchronous writes through a durable per-tenant operation log (the specification's §9.1–9.4, docs/seed-mapping.md).

While a tenant's hot path is enabled (a flag in its file), a Retain marked ``fast`` only appends
its items to the tenant's inbox and returns their event ids; background workers then adopt them
into the tenant's operation log and apply them in rounds through the synchronous writes' own path.
Each module does one job and is handed the few others it talks to:

* ``queue.py``: accept a fast write (append to the inbox, answer ENQUEUED);
* ``worker.py``: the worker threads and their rounds (adopt, claim, a failed round's retries);
* ``commit.py``: a round's extraction, persisted, then ONE commit that applies and finishes its
  operations (an operation's retries; a poison operation ends ``failed``);
* ``barrier.py``: Flush and Disable; ``events.py``: GetEvent, ListEvents, WatchEvents' transitions;
* ``state.py``: the enabled flag and Status; ``snapshot.py``: the one read of log and inbox
  together that they all make;
* ``scheduler.py`` (which tenant a worker takes), ``changes.py`` (who waits for a tenant),
  ``depths.py`` (the queue depth gauges), ``recovery.py`` (the recovery index),
  ``retention.py`` (how long finished events are kept);
* ``poison.py``: the poison-marker test seam.

``HotPath`` (facade.py) builds them and is what the engine and the transport call: it only passes each
call to the part whose job it is. What a fast write promises, and when it reaches the disk
(``--hot-path-sync``): docs/hot-path.md.
"""

from __future__ import annotations

from mnemosyne.engine.hot_path.facade import HotPath
from mnemosyne.engine.hot_path.poison import PoisonedExtractor

__all__ = ["HotPath", "PoisonedExtractor"]
