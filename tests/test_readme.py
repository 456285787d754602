"""README.md is a front door: short, and every link in it (and in docs/) leads somewhere."""
import re
import subprocess
import sys
from pathlib import Path

import pytest
from chapter_scripts import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def relative_links(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks hold no links,
    text = re.sub(r"`[^`\n]*`", "", text)  # and neither does inline code
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not re.match(r"[a-z]+://|#|mailto:", target):
            yield target.split("#")[0]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page):
    missing = [t for t in relative_links(page) if not (page.parent / t).exists()]
    assert not missing, f"{page.name} links to what does not exist: {missing}"


def test_the_readme_links_every_reference_page():
    linked = {Path(t).name for t in relative_links(REPO / "README.md")}
    pages = {p.name for p in (REPO / "docs").glob("*.md")} - {"version-matrix.md"}
    assert pages <= linked, f"docs/ pages the README does not link: {sorted(pages - linked)}"


def test_the_readme_is_a_front_door():
    size = len((REPO / "README.md").read_bytes())
    assert size < 15_000, f"README.md is {size} bytes: move reference material to docs/"


def section(text, heading):
    """The text under a '## heading', up to the next '## '."""
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_contributors_pages_hang_off_the_contribute_row_not_the_readers_reference():
    readme = (REPO / "README.md").read_text()
    contribute = next(line for line in readme.splitlines() if line.startswith("| contribute |"))
    reference = section(readme, "Reference")
    for page in ("docs/tests.md", "docs/provenance.md"):
        assert f"]({page})" in contribute, f"the contribute row does not link {page}"
        assert page not in reference, f"{page} is for contributors, not in the reader's reference list"


def test_3_plus_2_is_explained_where_it_first_appears():
    readme = (REPO / "README.md").read_text()
    first = readme.index("3 + 2")
    assert "2 + 3" in readme[first - 200:first + 200] and "the 3 first" in readme[first - 200:first + 200], (
        "the README's first '3 + 2' must say why it is the chapter's 2 + 3")


RECORDER_ONE_LINER = re.compile(r"`(from extras\.autograd_diagram import [^`]+)`")


def test_the_recorders_one_liner_runs_as_printed():
    readme = (REPO / "README.md").read_text()
    one_liner = RECORDER_ONE_LINER.search(readme)
    assert one_liner, "the README's recorder one-liner, with its import, is missing"
    # A reader's loss, as the README's first bullet builds it; then the line exactly as printed.
    program = ("import torch\n"
               "from hardened_ops import DEVICE, TritonGELU\n"
               "x = torch.randn(6).to(DEVICE).requires_grad_(True)\n"
               "loss = (2 * TritonGELU.apply(x) + 1).sum()\n"
               f"{one_liner[1]}\n")
    result = subprocess.run([sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert re.search(r"TritonGELUBackward +received 2;", result.stdout), result.stdout


INSTALL_LOG = REPO / "benchmarks/results/install_sizes.log"


def measured_install_figures():
    """The README's wording of tools/install_sizes.sh's totals: (PyPI's CUDA route, the no-GPU route)."""
    text = INSTALL_LOG.read_text()
    assert text.startswith("tree "), "the log must begin with the tree it measured"
    cuda, cpu = text.split("\n===== 2.", 1)
    assert "CUDA build" in re.search(r"^torch wheel: .*$", cuda, re.M)[0]
    assert "+cpu" in re.search(r"^torch wheel: .*$", cpu, re.M)[0]

    def download_mb(part):
        return float(re.search(r"([\d.]+) MB +[\d.]+ MB unpacked +in all", part)[1])

    def installed_mb(part):
        return int(re.search(r"^the venv: (\d+) MB", part, re.M)[1])

    seconds = (float(re.search(r"^python3 -m venv: ([\d.]+) s", cpu, re.M)[1])
               + float(re.search(r"^then pip install -r requirements\.txt .*?: ([\d.]+) s", cpu, re.M)[1]))
    return (f"{download_mb(cuda) / 1000:.2f} GB to download, {installed_mb(cuda) / 1000:.2f} GB installed",
            f"{download_mb(cpu):.0f} MB to download, {installed_mb(cpu) / 1000:.2f} GB installed, {seconds:.0f} s")


def test_the_readme_gives_the_measured_install_sizes():
    readme = (REPO / "README.md").read_text()
    cuda_row = next(line for line in readme.splitlines() if line.startswith("| read along (Linux, a CUDA GPU) |"))
    cpu_row = next(line for line in readme.splitlines() if line.startswith("| read along without a GPU |"))
    no_gpu_steps = readme.split("\n### Without a GPU\n", 1)[1].split("\n#", 1)[0]
    cuda, cpu = measured_install_figures()
    assert cuda in cuda_row, f"the README's make check row should say {cuda!r} ({INSTALL_LOG.name})"
    assert "](#without-a-gpu)" in cpu_row, "the no-GPU row should lead to the no-GPU steps"
    assert cpu in no_gpu_steps.split("> **Note:**", 1)[-1], (
        f"the note under the no-GPU steps should say {cpu!r} ({INSTALL_LOG.name})")
    assert "PyTorch CPU index" in no_gpu_steps, "the no-GPU route should say where its torch comes from"


def test_the_uv_row_says_what_uv_downloads_and_the_way_round_it():
    readme = (REPO / "README.md").read_text()
    uv_row = next(line for line in readme.splitlines() if line.startswith("| [uv]("))
    cuda_download = measured_install_figures()[0].split(" to download")[0]
    assert "CUDA build" in uv_row and cuda_download in uv_row, (
        f"the uv row should say that uv takes PyPI's CUDA build of torch ({cuda_download})")
    assert "steps below" in uv_row or "#without-a-gpu" in uv_row, "and point a reader without a GPU elsewhere"


def github_anchors(page):
    """The #fragments GitHub gives a page's headings."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    anchors, seen = set(), {}
    for heading in re.findall(r"^#{1,6} +(.+?) *$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def links_with_anchors(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if "#" in target and not re.match(r"[a-z]+://|mailto:", target):
            path, anchor = target.split("#", 1)
            yield target, (page.parent / path if path else page), anchor


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_link_to_a_heading_finds_it(page):
    broken = [target for target, linked, anchor in links_with_anchors(page)
              if linked.suffix == ".md" and linked.exists() and anchor not in github_anchors(linked)]
    assert not broken, f"{page.name} links to headings that do not exist: {broken}"


def test_docs_has_a_start_page_that_leads_everywhere():
    start = REPO / "docs/README.md"
    assert "docs/README.md" in {t for t in relative_links(REPO / "README.md")}, "the README should link docs/README.md"
    linked = {Path(t).name for t in relative_links(start)}
    pages = {p.name for p in (REPO / "docs").glob("*.md")} - {"README.md"}
    assert pages <= linked, f"docs/README.md does not lead to: {sorted(pages - linked)}"


def test_the_take_the_op_row_says_how_to_use_each_name_it_imports():
    """No 'see below' that leads nowhere: the row itself shows each name in use."""
    import ast
    readme = (REPO / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| take the op into your own model |"))
    names = re.search(r"`from hardened_ops import ([\w, ]+)`", row)[1].split(", ")
    defined = {node.name for node in ast.parse((REPO / "hardened_ops.py").read_text()).body
               if isinstance(node, ast.ClassDef)}
    for name in names:
        assert name in defined, f"hardened_ops.py defines no {name}"
        assert f"`{name}.apply(" in row or f"`{name}()" in row, f"the row should show {name} in use"
    assert "see below" not in row
