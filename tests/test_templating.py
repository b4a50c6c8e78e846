"""Kernel templates compiled ahead of time (tinydl/backends/templating.py): a wheel ships
Jinja2's Python for every template; a compiled module is used only when it was made from the
template's current source by the running Jinja2, and renders exactly what compiling does."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

jinja2 = pytest.importorskip("jinja2")

from tinydl.backends import planned, templating  # noqa: E402


@pytest.fixture
def compiled_tree(tmp_path, monkeypatch):
    """Every template compiled into a copy of the kernel packages' template files under
    tmp_path, importable as tinydl._templates (the source checkout's own folder untouched)."""
    root = tmp_path / "tree"
    for package in templating.PACKAGES:
        src = Path(importlib.import_module(package).__path__[0])
        dst = root.joinpath(*package.split("."))
        dst.mkdir(parents=True)
        for path in src.iterdir():
            if path.suffix in templating.SUFFIXES:
                (dst / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    written = templating.precompile(root)
    target = importlib.import_module(templating.TARGET)
    monkeypatch.setattr(target, "__path__", [str(root.joinpath(*templating.TARGET.split(".")))])

    def forget():
        for name in [m for m in sys.modules if m.startswith(templating.TARGET + ".")]:
            del sys.modules[name]
        templating._missing.clear()

    forget()
    yield written
    forget()


def _environment(package):
    env = planned._environment(package)
    env.bytecode_cache = None  # compile, never read a cached template
    return env


def test_every_template_is_compiled_and_loads(compiled_tree):
    """Each template file of the kernel packages has its module, and the environment loads
    it from there (its root function is the module's) instead of compiling it."""
    names = {p.name for p in compiled_tree}
    count = 0
    for package in templating.PACKAGES:
        env = _environment(package)
        folder = importlib.import_module(package).__path__[0]
        for name in sorted(os.listdir(folder)):
            if not name.endswith(templating.SUFFIXES):
                continue
            assert f"{templating.module_name(package, name)}.py" in names, name
            source = open(f"{folder}/{name}", encoding="utf-8").read()
            namespace = templating.compiled(package, name, source)
            assert namespace is not None, name
            assert env.get_template(name).root_render_func is namespace["root"], name
            count += 1
    assert count >= 40


def test_compiled_templates_render_the_same_kernels(compiled_tree, rng, monkeypatch):
    """Every kernel a webgpu plan of convolutions of every geometry renders (with the includes
    and macro imports of its templates) comes out the same from the compiled modules as from
    the templates compiled from source."""
    from helpers.models import conv_stack_graph

    pytest.importorskip("wgpu")
    import tinydl as td
    from tinydl.backends import get_backend

    if not get_backend("webgpu").available():
        pytest.skip(get_backend("webgpu").unavailable_reason())
    from tinydl.backends.webgpu import kernels, program

    calls = []
    real = program.render

    def recording(template, **params):
        calls.append((template, params))
        return real(template, **params)

    monkeypatch.setattr(program, "render", recording)
    td.compile(conv_stack_graph(rng), backends=("webgpu",), strict=True)
    assert len({t for t, _ in calls}) >= 2
    package = kernels.__name__
    ahead = _environment(package)
    folder = importlib.import_module(package).__path__[0]
    source = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder), undefined=jinja2.StrictUndefined,
        **templating.OPTIONS,
    )  # fmt: skip
    for template, params in calls:
        t = ahead.get_template(template)
        name = templating.module_name(package, template)
        assert t.root_render_func is sys.modules[f"{templating.TARGET}.{name}"].root
        assert t.render(**params) == source.get_template(template).render(**params), template


def test_a_stale_or_foreign_module_is_not_used(compiled_tree, monkeypatch):
    """A module made from another source, or by another Jinja2 version, is passed over."""
    package, name = templating.PACKAGES[0], "common.wgsl"
    folder = importlib.import_module(package).__path__[0]
    source = open(f"{folder}/{name}", encoding="utf-8").read()
    assert templating.compiled(package, name, source) is not None
    assert templating.compiled(package, name, source + "// edited\n") is None
    monkeypatch.setattr(jinja2, "__version__", "0.0.0")
    assert templating.compiled(package, name, source) is None


def test_no_compiled_module_falls_back_to_compiling(monkeypatch):
    """Without the module (a source checkout), the template is compiled: it renders."""
    package = templating.PACKAGES[0]
    monkeypatch.setattr(templating, "compiled", lambda *a: None)
    env = _environment(package)
    assert "fn " in env.get_template("common.wgsl").render()


def test_imports_ahead_once_a_process():
    """A GPU context imports Jinja2 and what a session needs on a thread while it makes its
    device: each module once a process, after which they are there."""
    first = planned.prefetch_imports("tinydl.backends.webgpu.program")
    if first is not None:
        first.join(timeout=60)
    assert planned.prefetch_imports("tinydl.backends.webgpu.program") is None
    for name in ("jinja2.runtime", *planned.SESSION_MODULES, "tinydl.backends.webgpu.program"):
        assert name in sys.modules, name
    later = planned.prefetch_imports("tinydl.backends.cuda.kernels")  # only what is new
    if later is not None:
        later.join(timeout=60)
        assert "tinydl.backends.cuda.kernels" in sys.modules


def test_code_fingerprint_made_ahead(monkeypatch):
    """The thread that imports ahead also fingerprints tinydl's files (the model and session
    caches' key), so the first load of a process does not stat every file."""
    from tinydl import snapshot

    monkeypatch.setattr(planned, "_prefetched", set())
    snapshot.code_fingerprint.cache_clear()
    thread = planned.prefetch_imports()
    assert thread is not None
    thread.join(timeout=60)
    assert snapshot.code_fingerprint.cache_info().currsize == 1


def test_starting_the_cuda_driver_ahead_is_quiet_without_one(monkeypatch):
    """The CUDA context starts the driver through ctypes (the GIL let go meanwhile); where the
    library cannot be loaded that is left to CuPy, which says what is wrong."""
    import ctypes

    from tinydl.backends.cuda import context

    def missing(name, *a, **k):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    assert context._start_driver(0) is None
