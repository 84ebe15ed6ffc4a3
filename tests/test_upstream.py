"""Checks of the world outside this repository, run by `make check-upstream` and not by `make test`,
which downloads nothing after the install.

The Horovod page's one unexecuted block (docs/appendix/horovod.md): Horovod 0.28.1 does not build
against the pinned torch. This re-checks that reason, so that the day it stops holding (a new Horovod release,
or a torch whose headers accept C++14) the check fails and the page's Horovod block can become a run
example. Checking the reason costs a 5 s download; building Horovod takes about 5 minutes on a
2-core machine before the compiler stops.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.upstream

HOROVOD_VERSION = "0.28.1"  # the page's version; the reason below was measured with it
TORCH_HEADER = Path(torch.__file__).parent / "include/torch/csrc/api/include/torch/all.h"


def download_latest_horovod_sdist(where: Path) -> Path:
    """The newest Horovod source release from the package index, without building anything."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--quiet",
            "-d",
            str(where),
            "horovod",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    archives = sorted(where.glob("horovod-*.tar.gz"))
    if result.returncode != 0 or not archives:
        pytest.skip(f"could not download Horovod from the package index: {result.stderr.strip()[-300:]}")
    return archives[0]


def test_horovod_still_cannot_build_against_our_torch(tmp_path):
    archive = download_latest_horovod_sdist(tmp_path)
    version = archive.name.removeprefix("horovod-").removesuffix(".tar.gz")
    assert version == HOROVOD_VERSION, (
        f"Horovod {version} has been released: try `HOROVOD_WITH_PYTORCH=1 pip install "
        f"--no-build-isolation horovod=={version}`; if it builds, run the Horovod block on "
        "docs/appendix/horovod.md as an example instead of excusing it"
    )
    with tarfile.open(archive) as tar:
        cmake = tar.extractfile(f"horovod-{version}/horovod/torch/CMakeLists.txt").read().decode()
    assert "set(CMAKE_CXX_STANDARD 14)" in cmake, "Horovod's torch extension no longer asks for C++14"
    assert "C++17 or later compatible compiler is required" in TORCH_HEADER.read_text(), (
        f"torch {torch.__version__} no longer requires C++17: Horovod {version} may build now"
    )


EXTERNAL_LINK = re.compile(r"\]\((https?://[^)\s]+)\)|<(https?://[^>\s]+)>")


def external_links() -> list[tuple[str, str]]:
    """(page, URL) for every link to another site in docs/."""
    docs = Path(__file__).resolve().parent.parent / "docs"
    found = []
    for page in sorted(docs.rglob("*.md")):
        for m in EXTERNAL_LINK.finditer(page.read_text()):
            found.append((str(page.relative_to(docs)), m.group(1) or m.group(2)))
    return found


@pytest.mark.parametrize(("page", "url"), external_links(), ids=[f"{p}:{u}" for p, u in external_links()])
def test_external_link_answers(page, url):
    """Links to other sites still lead somewhere: a 2xx or 3xx answer within 30 s."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={"User-Agent": "distdocs link check"}, method="GET")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status = response.status
    except urllib.error.HTTPError as e:
        status = e.code
    assert status < 400, f"{page}: {url} answered {status}"
