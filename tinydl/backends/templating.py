"""Kernel templates compiled ahead of time: Jinja2's Python for every template file of the
kernel packages, written into `tinydl/_templates` when the wheel is built (setup.py), so a
process with an empty cache does not compile templates before its first kernel (0.07-0.13 s of
a cold start on an H100 host; pip byte-compiles the modules at install, as it does the rest).

A compiled module is used only when its template's source and the Jinja2 version are the ones
it was made from; otherwise (a source checkout, an edited template, another Jinja2) the template
is compiled as before, through the bytecode cache. This module imports nothing of tinydl: the
build loads it from its file.
"""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path
from typing import Any

# The packages whose template files are compiled ahead, and the suffixes of those files.
PACKAGES = ("tinydl.backends.webgpu.kernels", "tinydl.backends.cuda.kernels")
SUFFIXES = (".wgsl", ".cu", ".cuh")
# Where the compiled modules go (a package of the wheel; empty in a source checkout).
TARGET = "tinydl._templates"
# The Environment's settings that shape compiled code (planned._environment uses them too).
OPTIONS = {"trim_blocks": True, "lstrip_blocks": True, "keep_trailing_newline": True}


def module_name(package: str, name: str) -> str:
    """The compiled module of template `name` of `package`."""
    return "tmpl_" + hashlib.sha1(f"{package}/{name}".encode()).hexdigest()[:20]


def digest(source: str) -> str:
    return hashlib.sha1(source.encode()).hexdigest()


def filename(package: str, name: str) -> str:
    """The template's file name as Jinja2 knows it: unique across packages (the bytecode
    cache's key too)."""
    return f"{package}/{name}"


def precompile(root: Path) -> list[Path]:
    """Compile every template file of PACKAGES under `root` (a source tree or a build folder)
    into TARGET's folder under it; returns the files written."""
    import jinja2

    env = jinja2.Environment(**OPTIONS)
    target = root.joinpath(*TARGET.split("."))
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for package in PACKAGES:
        folder = root.joinpath(*package.split("."))
        for path in sorted(folder.iterdir()):
            if path.suffix not in SUFFIXES:
                continue
            source = path.read_text(encoding="utf-8")
            # defer_init: the module refers to no environment until one loads it (as Jinja2's
            # own compile_templates writes them, for its ModuleLoader)
            code = env.compile(
                source, path.name, filename(package, path.name), raw=True, defer_init=True
            )
            out = target / f"{module_name(package, path.name)}.py"
            out.write_text(
                f"# {package}/{path.name} compiled by Jinja2 (tinydl/backends/templating.py)\n"
                f"SOURCE_SHA1 = {digest(source)!r}\n"
                f"JINJA2_VERSION = {jinja2.__version__!r}\n" + code + "\n",
                encoding="utf-8",
            )
            written.append(out)
    return written


_missing: set[str] = set()


def _module(package: str, name: str):
    """Template `name`'s compiled module, or None where there is none (a source checkout)."""
    module = f"{TARGET}.{module_name(package, name)}"
    if module in _missing:
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        _missing.add(module)
        return None


def _fitting(package: str, name: str, read) -> dict[str, Any] | None:
    """The namespace of template `name`'s compiled module when there is one made from its
    source (`read(name)`, read only where there is a module to check) by this Jinja2."""
    import jinja2

    mod = _module(package, name)
    if mod is None or mod.JINJA2_VERSION != jinja2.__version__:
        return None
    return mod.__dict__ if mod.SOURCE_SHA1 == digest(read(name)) else None


def compiled(package: str, name: str, source: str) -> dict[str, Any] | None:
    """The namespace of template `name`'s compiled module when there is one made from this
    source by this Jinja2, else None."""
    return _fitting(package, name, lambda _: source)


def loader(package: str, read):
    """A Jinja2 loader of `package`'s templates (`read(name)` gives a template's source) that
    takes the compiled module where it fits, else compiles through the environment's
    bytecode cache."""
    import jinja2

    class Loader(jinja2.BaseLoader):
        def get_source(self, environment, name):
            return read(name), filename(package, name), lambda: True

        def load(self, environment, name, globals=None):
            namespace = _fitting(package, name, read)
            if namespace is None:  # (compiled through the bytecode cache, as without a wheel)
                return super().load(environment, name, globals)
            return environment.template_class.from_module_dict(environment, namespace, globals)

    return Loader()
