"""A PEP 517 build backend from the standard library alone, so that `pip install ./clients/python`
needs nothing from a package index (setuptools' backend needs `wheel` too, which Debian's python3
lacks). It builds the one pure-Python package under src/ into a wheel, and an sdist of this folder.
"""

import base64
import hashlib
import io
import tarfile
import zipfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, when installed
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
NAME = PROJECT["name"]
VERSION = PROJECT["version"]
DIST = f"{NAME}-{VERSION}"
TAG = "py3-none-any"


def _metadata() -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {NAME}",
        f"Version: {VERSION}",
        f"Summary: {PROJECT['description']}",
        f"License: {PROJECT['license']['text']}",
        f"Requires-Python: {PROJECT['requires-python']}",
        *(f"Requires-Dist: {dep}" for dep in PROJECT.get("dependencies", [])),
        *(f"Classifier: {c}" for c in PROJECT.get("classifiers", [])),
        "Description-Content-Type: text/markdown",
    ]
    return "\n".join(lines) + "\n\n" + (ROOT / PROJECT["readme"]).read_text("utf-8")


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files: dict[str, bytes] = {}
    for path in sorted((ROOT / "src").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            files[path.relative_to(ROOT / "src").as_posix()] = path.read_bytes()
    info = f"{DIST}.dist-info"
    files[f"{info}/METADATA"] = _metadata().encode()
    files[f"{info}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: runguard_build\nRoot-Is-Purelib: true\nTag: {TAG}\n".encode()
    record = [_record_line(name, data) for name, data in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel_name = f"{DIST}-{TAG}.whl"
    with zipfile.ZipFile(Path(wheel_directory) / wheel_name, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
    return wheel_name


def build_sdist(sdist_directory, config_settings=None):
    sdist_name = f"{DIST}.tar.gz"
    with tarfile.open(Path(sdist_directory) / sdist_name, "w:gz") as sdist:
        for path in sorted(ROOT.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and ".pytest_cache" not in path.parts:
                sdist.add(path, arcname=f"{DIST}/{path.relative_to(ROOT).as_posix()}")
        info = _metadata().encode()
        entry = tarfile.TarInfo(f"{DIST}/PKG-INFO")
        entry.size = len(info)
        sdist.addfile(entry, io.BytesIO(info))
    return sdist_name
