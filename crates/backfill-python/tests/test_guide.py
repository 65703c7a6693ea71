"""Every ```python block of the front page (README.md) and the guide
(docs/guide/*.md) runs as a program of its own, in a directory of its own.

A block whose first line is `# not run: <why>` is skipped with that reason
(an excerpt of a larger file, one that reads what a shell session above it
wrote). A block that imports an orchestrator is skipped where it is not
installed: Airflow is never installed by the test command, Dagster is
(scripts/python-tests.sh), so with CI set a missing Dagster fails."""

import glob
import importlib.util
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "guide", "*.md")))

# Modules a block may import that the package does not depend on, and
# whether CI must have them.
OPTIONAL = {"dagster": True, "airflow": False}


def _blocks():
    """(page, line, code) of every ```python block, the line its code starts on."""
    blocks = []
    for page in PAGES:
        with open(page, encoding="utf-8") as f:
            lines = f.read().split("\n")
        fence, start = None, None
        for i, line in enumerate(lines):
            stripped = line.strip()
            if fence is None:
                m = re.match(r"^ {0,3}(`{3,}|~{3,})\s*(\S*)", line)
                if m:
                    fence = m.group(1)
                    start = i + 1 if m.group(2).split(",")[0] == "python" else None
            elif stripped.startswith(fence) and stripped.strip(fence[0]) == "":
                if start is not None:
                    blocks.append((os.path.relpath(page, ROOT), start + 1, "\n".join(lines[start:i]) + "\n"))
                fence, start = None, None
    return blocks


BLOCKS = _blocks()


def test_the_front_pages_python_example_is_found():
    pages = [page for page, _, _ in BLOCKS]
    assert "README.md" in pages, "README.md has no ```python block: is the parsing right?"
    assert any(page.startswith(os.path.join("docs", "guide")) for page in pages)


@pytest.mark.parametrize("page, line, code", BLOCKS, ids=[f"{page}:{line}" for page, line, _ in BLOCKS])
def test_the_block_runs(page, line, code, tmp_path):
    first = code.split("\n", 1)[0].strip()
    if first.startswith("# not run:"):
        reason = first[len("# not run:"):].strip()
        assert reason, f"{page}:{line}: `# not run:` says why"
        pytest.skip(reason)
    for module, required_in_ci in OPTIONAL.items():
        imports = re.search(rf"^\s*(import|from) {module}\b", code, re.MULTILINE)
        if imports and importlib.util.find_spec(module) is None:
            if required_in_ci and os.environ.get("CI"):
                pytest.fail(f"CI is set and {module} is not installed (scripts/python-tests.sh installs it)")
            pytest.skip(f"{module} is not installed here")
    script = tmp_path / "block.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{page}:{line} failed:\n{done.stderr}"
