"""Continuous replication of every tenant's files to object storage (docs/replication.md):
Litestream v0.5 as a supervised child driven through its control socket, and the bucket read and
cleaned through our own S3 client. The store tells it of its files through store/replicas.py."""
