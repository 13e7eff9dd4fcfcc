"""The supported numba versions: the compiled solver uses numba's private ``_get_jit_address``
(in :mod:`keras_structured.engine.oracle_address` only), so ``setup.cfg`` pins the versions it
was tested on, and a numba without that function fails at import with a message that says so."""

from __future__ import annotations

import configparser
import subprocess
import sys
from pathlib import Path

import numba
from packaging.requirements import Requirement

from keras_structured.engine.oracle_address import SUPPORTED_NUMBA

ROOT = Path(__file__).resolve().parents[1]


def _pinned_numba() -> Requirement:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    requirements = [Requirement(line) for line in config["options"]["install_requires"].split("\n") if line]
    return next(requirement for requirement in requirements if requirement.name == "numba")


def test_setup_cfg_pins_the_supported_numba():
    assert str(_pinned_numba().specifier) == str(Requirement(f"numba{SUPPORTED_NUMBA}").specifier)


def test_the_installed_numba_is_a_supported_one():
    assert _pinned_numba().specifier.contains(numba.__version__), (
        f"numba {numba.__version__} is outside the supported range numba{SUPPORTED_NUMBA}: "
        "keras_structured/engine/oracle_address.py calls numba's private _get_jit_address. Run the "
        "engine tests on this version, then widen SUPPORTED_NUMBA and the pin in setup.cfg together."
    )


def test_a_numba_without_the_private_function_gets_a_clear_error():
    code = (
        "import numba.experimental.function_type as function_type\n"
        "del function_type._get_jit_address\n"
        "import keras_structured.engine.oracle_address\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode != 0
    assert f"needs numba{SUPPORTED_NUMBA}" in result.stderr and "_get_jit_address" in result.stderr
