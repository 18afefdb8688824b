"""Each example's README gives one install line; this installs exactly that line into a
fresh virtualenv (no test dependencies, nothing from this venv) and runs the example with
it, on SQLite. A missing dependency of an example fails here as it would for a user.

Slow (a virtualenv and a pip install per example, from the configured package index):
PORTQ_SKIP_EXAMPLE_INSTALLS=1 skips it with that reason."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

from portq.conformance.helpers import free_port, wait_until

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
#: each test makes a virtualenv and installs an example into it: minutes, left to `-m slow`
pytestmark = pytest.mark.slow
if os.environ.get("PORTQ_SKIP_EXAMPLE_INSTALLS") == "1":
    pytest.skip("PORTQ_SKIP_EXAMPLE_INSTALLS=1", allow_module_level=True)


def install_line(example: str) -> list[str]:
    """The README's one `pip install ...` line, as arguments."""
    lines = [line.strip() for line in (EXAMPLES / example / "README.md").read_text()
             .splitlines() if line.strip().startswith("pip install")]
    assert len(lines) == 1, f"examples/{example}/README.md needs one pip install line"
    return shlex.split(lines[0])


def fresh_venv(where: Path, python: str | None = None) -> Path:
    if python is None:
        venv.EnvBuilder(with_pip=True).create(where)
    else:
        subprocess.run([python, "-m", "venv", str(where)], check=True, timeout=300)
    return where / "bin" / "python"


def pip_install(python: Path, example: str) -> None:
    args = install_line(example)
    assert args[:2] == ["pip", "install"]
    proc = subprocess.run([str(python), "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]


def run(python: Path, *args: str, cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(python), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**_clean_env(), **(env or {})})
    assert proc.returncode == 0, (args, proc.stdout[-2000:], proc.stderr[-3000:])
    return proc


def _clean_env() -> dict[str, str]:
    """This process's environment without what points into the test venv."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def test_the_orders_example_runs_from_its_install_line(tmp_path: Path) -> None:
    python = fresh_venv(tmp_path / "venv")
    pip_install(python, "orders")
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    work = tmp_path / "orders"
    shutil.copytree(EXAMPLES / "orders", work)
    order = run(python, "orders.py", url, "order", "alice", "1999", cwd=work).stdout.strip()
    assert order.isdigit()
    counters = run(python, "worker.py", url, "--burst", cwd=work).stdout
    assert "'succeeded': 1" in counters


def test_the_fastapi_example_runs_from_its_install_line(tmp_path: Path) -> None:
    import httpx
    python = fresh_venv(tmp_path / "venv")
    pip_install(python, "fastapi")
    work = tmp_path / "fastapi"
    shutil.copytree(EXAMPLES / "fastapi", work)
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'shop.db'}"}
    port = free_port()
    server = subprocess.Popen(
        [str(python), "-m", "uvicorn", "app:app", "--host", "127.0.0.1", "--port", str(port)],
        cwd=work, env={**_clean_env(), **env}, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            if server.poll() is not None:
                raise AssertionError(f"uvicorn exited: {server.communicate()[1][-3000:]}")
            try:
                return httpx.get(base + "/openapi.json", timeout=5).status_code == 200
            except httpx.TransportError:
                return False
        assert wait_until(up, timeout=60, interval=0.3)
        created = httpx.post(base + "/orders", json={"customer": "ada", "total_cents": 1999},
                             timeout=30)
        assert created.status_code == 200, created.text
        order_id = created.json()["order_id"]
        run(python, "worker.py", "--burst", cwd=work, env=env)
        order = httpx.get(f"{base}/orders/{order_id}", timeout=30).json()
        assert order["invoice"] == {"order_id": order_id,
                                    "invoice_number": f"INV-{order_id:06d}"}
    finally:
        server.terminate()
        server.wait(30)


def test_the_django_example_runs_from_its_install_line(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    python312 = shutil.which("python3.12")
    if python312 is None or subprocess.run(
            [python312, "--version"], capture_output=True, env={
                **os.environ, "PYENV_VERSION": os.environ.get("PYENV_VERSION", "3.12.1")}
            ).returncode != 0:
        pytest.skip("the Django example needs Python 3.12 (python3.12 not found)")
    monkeypatch.setenv("PYENV_VERSION", os.environ.get("PYENV_VERSION", "3.12.1"))
    python = fresh_venv(tmp_path / "venv", python312)
    pip_install(python, "django")
    work = tmp_path / "django"
    shutil.copytree(EXAMPLES / "django", work)
    env = {"PORTQ_DJANGO_SQLITE": str(tmp_path / "shop.sqlite3"), "PORTQ_TEST_PG_URL": "",
           "PORTQ_TEST_MYSQL_URL": ""}
    run(python, "manage.py", "migrate", cwd=work, env=env)
    run(python, "manage.py", "portq_migrate", cwd=work, env=env)
    out = run(python, "manage.py", "portq_worker", "--burst", cwd=work, env=env)
    assert re.search(r"(?i)stopped|succeeded|claimed", out.stdout + out.stderr)
