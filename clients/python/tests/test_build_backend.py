"""`pip install ./clients/python` with no package index: the build backend needs nothing but the
standard library (httpx, the one dependency, is left out here with --no-deps)."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_installs_without_a_package_index(tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--target", str(target), str(ROOT)],
        check=True,
        capture_output=True,
    )
    assert (target / "runguard" / "__init__.py").is_file()
    assert (target / "runguard" / "py.typed").is_file()
    metadata = (target / "runguard-0.1.0.dist-info" / "METADATA").read_text()
    assert "Requires-Dist: httpx>=0.23,<1" in metadata


def test_wheel_holds_the_package_and_its_record(tmp_path):
    sys.path.insert(0, str(ROOT / "build_backend"))
    try:
        import runguard_build
    finally:
        sys.path.pop(0)
    name = runguard_build.build_wheel(str(tmp_path))
    with zipfile.ZipFile(tmp_path / name) as wheel:
        names = wheel.namelist()
    assert "runguard/client.py" in names
    assert "runguard-0.1.0.dist-info/RECORD" in names
