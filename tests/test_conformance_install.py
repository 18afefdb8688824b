"""``portq conformance`` from a plain install: pytest comes with every engine extra
(pyproject.toml); without it (``pip install portq`` alone) the command says exactly what
to install, exit 2, instead of a ModuleNotFoundError."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import portq
from portq.engines import ENGINES as REGISTRY

ROOT = Path(portq.__file__).resolve().parent.parent


def bare_venv(path: Path) -> Path:
    """A fresh virtualenv holding portq (from this checkout) and nothing else: no pytest,
    no driver. Returns its python."""
    venv.EnvBuilder(with_pip=False).create(path)
    python = path / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    Path(site.stdout.strip(), "portq-checkout.pth").write_text(f"{ROOT}\n")
    return python


def test_conformance_without_pytest_says_what_to_install(tmp_path: Path) -> None:
    python = bare_venv(tmp_path / "venv")
    check = subprocess.run([str(python), "-c", "import portq, importlib.util; "
                            "print(importlib.util.find_spec('pytest'))"],
                           capture_output=True, text=True, timeout=60)
    assert check.stdout.strip() == "None", "the bare venv sees a pytest"
    for url, extra in ((f"sqlite:///{tmp_path}/c.db", "sqlite"),
                       ("postgresql://app@127.0.0.1:1/db", "postgres"),
                       ("mysql://app:S3cret@127.0.0.1:1/db", "mysql")):
        proc = subprocess.run([str(python), "-m", "portq.cli", "conformance", url],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip() == (
            "portq: error: portq conformance runs on pytest, which is not installed; "
            f"install it with: pip install 'portq[{extra}]' (or: pip install 'pytest>=8')")
        assert "S3cret" not in proc.stderr


def test_every_engine_extra_brings_pytest() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    for engine in REGISTRY:
        assert any(req.replace(" ", "").startswith("pytest>=") for req in extras[engine.extra]), \
            engine.name
    assert not any("pytest" in req for req in project["dependencies"])


def test_conformance_runs_where_pytest_is_installed(tmp_path: Path) -> None:
    """What `pip install 'portq[sqlite]'` gives: portq plus pytest (this interpreter's)."""
    proc = subprocess.run([sys.executable, "-m", "portq.cli", "conformance",
                           f"sqlite:///{tmp_path}/c.db", "--", "-k", "test_rolled_back_enqueue"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
