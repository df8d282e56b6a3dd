"""The house's shape: the README's Layout table is the package tree and its layers, and no room outgrows itself.

The table's rows are derived here from what the code says (each subpackage's docstring, the import-linter layers
in pyproject.toml), so the README cannot drift from either; a failure prints the row as it should read.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pi_dispatch

PACKAGE = Path(pi_dispatch.__file__).parent
REPO = PACKAGE.parent
DATA_DIRS = {"example", "jobimage", "lua", "schema", "__pycache__"}
MAX_MODULE_LINES = 400


def _layers() -> list[list[str]]:
    """The layers contract, top first, each layer the subpackages that share it."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    return [[name.strip().removeprefix("pi_dispatch.") for name in layer.split("|")] for layer in contract["layers"]]


def _owns(package: str) -> str:
    docstring = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text())) or ""
    return " ".join(docstring.split())


def expected_rows() -> list[str]:
    layers = _layers()
    rows = []
    for depth, layer in enumerate(layers):
        below = [name for lower in layers[depth + 1 :] for name in lower]
        may = ", ".join(f"`{name}`" for name in below) or "the standard library only"
        rows += [f"| `pi_dispatch/{name}/` | {_owns(name)} | {may} |" for name in layer]
    return rows


def readme_rows() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| `pi_dispatch/")]


def test_the_layers_name_every_subpackage_once() -> None:
    subpackages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    layered = [name for layer in _layers() for name in layer]
    assert sorted(layered) == sorted(subpackages)


def test_the_top_level_holds_only_the_subpackages_and_package_data() -> None:
    loose = sorted(
        path.name
        for path in PACKAGE.iterdir()
        if path.suffix == ".py" and path.name not in ("__init__.py", "__main__.py")
    )
    assert loose == []
    folders = {path.name for path in PACKAGE.iterdir() if path.is_dir()}
    assert folders - DATA_DIRS == {path.parent.name for path in PACKAGE.glob("*/__init__.py")}


def test_the_readme_layout_table_is_the_tree_and_its_layers() -> None:
    assert readme_rows() == expected_rows(), "the README's Layout rows should read:\n" + "\n".join(expected_rows())


def test_every_subpackage_says_what_it_owns() -> None:
    for layer in _layers():
        for name in layer:
            assert len(_owns(name)) > 20, f"pi_dispatch/{name}/__init__.py says nothing of what it owns"


def test_no_module_outgrows_its_room() -> None:
    long = {
        str(path.relative_to(PACKAGE)): count
        for path in PACKAGE.rglob("*.py")
        if (count := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_the_architecture_guide_draws_the_same_layers() -> None:
    guide = (REPO / "docs" / "architecture.md").read_text()
    drawn = " > ".join(" | ".join(layer) for layer in _layers())
    assert re.sub(r"\s+", " ", drawn) in re.sub(r"\s+", " ", guide)


def test_no_line_is_kept_from_the_formatter() -> None:
    """Module sizes are as `ruff format` writes them: no line is held back from it to save lines."""
    kept = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in PACKAGE.rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"#\s*fmt:\s*(skip|off)", line)
    ]
    assert kept == []


def _worker_rooms() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contract = next(
        c for c in config["tool"]["importlinter"]["contracts"] if c.get("containers") == ["pi_dispatch.worker"]
    )
    return [name.strip() for layer in contract["layers"] for name in re.split(r"[:|]", layer)]


def test_the_worker_is_in_rooms_each_saying_what_it_holds_and_every_module_is_layered() -> None:
    worker = PACKAGE / "worker"
    rooms = {path.parent.name for path in worker.glob("*/__init__.py")}
    loose = {path.stem for path in worker.glob("*.py") if path.name != "__init__.py"}
    assert rooms and sorted(rooms | loose) == sorted(_worker_rooms())  # nothing escapes the stage contract
    for room in rooms:
        said = ast.get_docstring(ast.parse((worker / room / "__init__.py").read_text())) or ""
        assert len(said) > 20 and "\n" not in said.strip(), f"worker/{room}/__init__.py: one line saying what it holds"
    guide = (REPO / "docs" / "architecture.md").read_text().split("## The worker's rooms", 1)[1]
    assert all(re.search(rf"^{re.escape(room)}\s", guide, flags=re.M) for room in rooms)
