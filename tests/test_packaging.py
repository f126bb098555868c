"""What ``pip install .`` (not editable) installs: every package of the source tree, and the
default embedder's graph and model files (the README's first command recalls by meaning)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_of_the_source_is_installed() -> None:
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(settings["packages"])
    found = set()
    for name, folder in settings["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            found.add(".".join((name, *relative.parts)))
    # A folder mapped by package-dir of its own is that package (mnemosyne.client, mnemosyne.v1).
    missing = sorted(found - listed)
    assert not missing, f"pyproject.toml [tool.setuptools] packages lacks {missing}: pip install . would leave them out"


def test_the_default_embedders_files_are_package_data() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert {"minilm.onnx", "all-MiniLM-L6-v2/*"} <= set(data["mnemosyne.engine"])
    assert (ROOT / "service" / "engine" / "minilm.onnx").is_file()
