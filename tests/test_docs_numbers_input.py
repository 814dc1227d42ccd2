"""``bnexp report --update-docs`` on pages it cannot use as they are: a page that is not UTF-8 (or cannot be read)
is one error line naming it, exit code 2, nothing written; a page named on the command line without any block,
and a comment line that looks like a marker but is misspelt, are said, never a silent "0 files rewritten"
(docs/reliability.md, "Run-folder files and reports")."""

from __future__ import annotations

import json

import pytest

from bnexp.report import report_main
from bnexp.report.docs_numbers import DocsError, check_docs, parse_blocks

OPEN = "<!-- bnexp:numbers source=docs/r.json view=cifar_headline -->"
CLOSE = "<!-- /bnexp:numbers -->"


def _repo(tmp_path, page: bytes):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "r.json").write_text(json.dumps({}))
    (tmp_path / "README.md").write_bytes(page)
    return tmp_path / "README.md"


def _run(args, capsys):
    code = report_main(args)
    out, err = capsys.readouterr()
    return code, " ".join(out.split()), err


@pytest.mark.parametrize("page, looks", [
    ("# Résumé\n".encode("latin-1"), "Latin-1"),
    ("# Résumé\n".encode("utf-16"), "UTF-16"),
])
@pytest.mark.parametrize("named", [True, False])
def test_a_page_that_is_not_utf8_is_one_line_naming_it_and_its_encoding(tmp_path, monkeypatch, capsys, page, looks,
                                                                        named):
    path = _repo(tmp_path, page)
    (tmp_path / "docs" / "ok.md").write_text("\n".join(["# T", OPEN, CLOSE, ""]))
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(["--update-docs", "README.md"] if named else ["--update-docs"], capsys)
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith("bnexp report: error: README.md: not UTF-8 text") and looks in err, err
    assert path.read_bytes() == page and (tmp_path / "docs" / "ok.md").read_text().count("\n") == 3
    with pytest.raises(DocsError, match=r"^README\.md: not UTF-8"):
        check_docs(tmp_path)


def test_a_named_page_without_a_block_says_so(tmp_path, monkeypatch, capsys):
    _repo(tmp_path, b"# T\nno numbers here\n")
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(["--update-docs", "README.md"], capsys)
    assert code == 0 and err == "" and "README.md: no bnexp:numbers block" in out and "0 files rewritten" in out
    code, out, err = _run(["--update-docs"], capsys)  # the default pages: none has a block
    assert code == 0 and "no bnexp:numbers block in README.md or docs/**/*.md" in out


@pytest.mark.parametrize("marker", [
    "<!-- bnexp:number source=docs/r.json view=cifar_headline -->",
    "<!-- bnexp numbers source=docs/r.json view=cifar_headline -->",
    "<!-- BNEXP:numbers source=docs/r.json view=cifar_headline -->",
    "<!-- /bnexp:number -->",
])
def test_a_misspelt_marker_is_one_line_naming_file_and_line(tmp_path, monkeypatch, capsys, marker):
    page = "\n".join(["# T", "", marker, "stale", CLOSE if not marker.startswith("<!-- /") else "", ""]).encode()
    path = _repo(tmp_path, page)
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(["--update-docs", "README.md"], capsys)
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith("bnexp report: error: README.md:3: ") and "is not a bnexp:numbers marker" in err, err
    assert path.read_bytes() == page


def test_marker_lookalikes_in_code_fences_and_prose_are_text():
    text = "\n".join(["```", "<!-- bnexp:number x -->", "```", "prose <!-- bnexp:number --> inline", ""])
    assert parse_blocks(text, "page.md") == []
