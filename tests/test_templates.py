"""Kernel templates (Jinja2) are compiled once per machine: their bytecode is kept in
$TINYDL_CACHE_DIR/templates, checked against the template's source, and a cache that is damaged
or cannot be written costs only the compile."""

from __future__ import annotations

import pytest

jinja2 = pytest.importorskip("jinja2")

from tinydl.backends.planned import templates  # noqa: E402


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package of two templates, one including the other (a name of its own per test: the
    import system keeps packages by name)."""
    name = f"templates_{abs(hash(str(tmp_path)))}"
    root = tmp_path / "src" / name
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "part.txt").write_text("[{{ x }}]")
    (root / "main.txt").write_text(
        '{% for i in range(n) %}{{ i }}{% include "part.txt" %}{% endfor %}'
    )
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    return root


def test_templates_are_compiled_once_and_checked_against_their_source(
    package, tmp_path, monkeypatch
):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TINYDL_CACHE_DIR", str(cache))
    assert templates(package.name)("main.txt", n=3, x="a") == "0[a]1[a]2[a]"
    entries = sorted((cache / "templates").iterdir())
    assert len(entries) == 2  # main.txt and part.txt

    # a new process (a new environment) loads them: it compiles nothing
    def refuse(*args, **kwargs):
        raise AssertionError("compiled a template the cache holds")

    with monkeypatch.context() as m:
        m.setattr(jinja2.Environment, "compile", refuse)
        assert templates(package.name)("main.txt", n=2, x="b") == "0[b]1[b]"

    # an edited template is compiled again, never served stale
    (package / "part.txt").write_text("<{{ x }}>")
    assert templates(package.name)("main.txt", n=2, x="c") == "0<c>1<c>"

    # damaged entries are compiled again
    for entry in (cache / "templates").iterdir():
        entry.write_bytes(b"not bytecode")
    assert templates(package.name)("main.txt", n=1, x="d") == "0<d>"


def test_a_cache_that_cannot_be_written_costs_only_the_compile(package, tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("TINYDL_CACHE_DIR", str(blocked))
    assert templates(package.name)("main.txt", n=2, x="e") == "0[e]1[e]"
