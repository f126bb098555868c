"""The engine: memory logic between the transport and the store (docs/architecture.md)."""

import ctypes
import sys

# usearch (engine/ann.py) carries a static copy of the C++ runtime; when it is the first loaded,
# importing ONNX Runtime (the default embedder, engine/sentence_embedder.py) afterwards crashes
# the process (SIGSEGV in std::codecvt). The system's runtime loaded first, globally, keeps the two
# apart whatever the import order (tests/test_minilm_equality.py imports them in the crashing one).
if sys.platform.startswith("linux"):
    try:
        ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
    except OSError:  # no system C++ runtime: then neither library links to it
        pass
