"""The layout: the library imports no application, and applications use only its public API.

The library is ``keras_structured`` without ``keras_structured.applications``; the
applications are that package (UD parser, trace-norm parser, NLI), ``rl``, the examples and
the benchmarks. A private module or name is one whose name starts with ``_`` (``__main__``
and ``__init__`` aside).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "keras_structured"
APPLICATIONS = LIBRARY / "applications"
APPLICATION_ROOTS = (APPLICATIONS, ROOT / "rl", ROOT / "examples", ROOT / "benchmarks")


def _imports(path: Path):
    """``(line, module, names)`` of every ``import`` and ``from ... import`` in ``path``."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module, tuple(alias.name for alias in node.names)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _library_modules():
    return [path for path in LIBRARY.rglob("*.py") if APPLICATIONS not in path.parents]


def test_importing_the_library_imports_no_application():
    code = (
        "import sys, keras_structured; "
        "print([m for m in sys.modules if m.startswith('keras_structured.applications')"
        " or m.split('.')[0] == 'rl'])"
    )
    command = [sys.executable, "-c", code]
    result = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout


@pytest.mark.parametrize("path", _library_modules(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_library_module_imports_an_application(path):
    upward = [
        f"{path.name}:{line}: {module}"
        for line, module, names in _imports(path)
        if module.startswith("keras_structured.applications")
        or module.split(".")[0] == "rl"
        or (module == "keras_structured" and "applications" in names)
    ]
    assert not upward, upward


def _library_private_imports(path: Path, root: Path = ROOT) -> list[str]:
    """Imports in ``path`` of private library modules or private names of library modules
    (an application's own modules may share private names among themselves)."""
    found = []
    for line, module, names in _imports(path):
        parts = module.split(".")
        if parts[0] != "keras_structured" or module.startswith("keras_structured.applications"):
            continue
        if any(_private(part) for part in parts) or any(_private(name) for name in names):
            found.append(f"{path.relative_to(root)}:{line}: {module} {names}")
    return found


def test_applications_use_only_the_public_api():
    found = [
        entry
        for root in APPLICATION_ROOTS
        for path in sorted(root.rglob("*.py"))
        for entry in _library_private_imports(path)
    ]
    assert not found, "\n".join(found)


def test_the_check_catches_a_private_import(tmp_path):
    """The scan above can fail: a module importing ``keras_structured._registration``."""
    module = tmp_path / "application.py"
    module.write_text("from keras_structured._registration import register_string_identifiers\n")
    assert _library_private_imports(module, tmp_path)
