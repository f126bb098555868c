"""Many members: forwarding a call to its tenant's owner, the admin fan-outs, moves."""
