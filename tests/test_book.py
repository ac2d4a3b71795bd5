"""The book builds with zero Sphinx warnings, and every page of the table of contents is in it."""

from __future__ import annotations

from pathlib import Path

import yaml


def toc_files(toc: dict) -> list[str]:
    files = [toc["root"]]

    def walk(entries: list[dict]) -> None:
        for entry in entries:
            if "file" in entry:
                files.append(entry["file"])
            for key in ("sections", "chapters"):
                walk(entry.get(key, []))
            for part in entry.get("parts", []):
                walk(part.get("chapters", []))

    for part in toc.get("parts", []):
        walk(part.get("chapters", []))
    walk(toc.get("chapters", []))
    return files


def test_toc_lists_existing_files(root: Path) -> None:
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    for f in toc_files(toc):
        matches = [p for ext in (".md", ".ipynb") if (p := root / f"{f}{ext}").exists()]
        assert matches, f"_toc.yml lists {f!r}, but neither {f}.md nor {f}.ipynb exists"


def test_book_builds_every_toc_page(root: Path, built_book: Path) -> None:
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    pages = toc_files(toc)
    assert len(pages) >= 3
    missing = [p for p in pages if not (built_book / f"{p}.html").exists()]
    assert not missing, f"pages in _toc.yml missing from the built site: {missing}"


def test_solutions_are_not_published(built_book: Path) -> None:
    assert not (built_book / "solutions").exists(), "solutions/ must never be in the site"
