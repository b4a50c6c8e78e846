"""The wheel's one build step beyond setuptools' own: the kernel templates compiled to Python by
Jinja2 (tinydl/backends/templating.py), so an installed tinydl does not compile them at its first
start. Everything else is in pyproject.toml."""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    def run(self):
        super().run()
        spec = importlib.util.spec_from_file_location(
            "_tinydl_templating", Path(__file__).parent / "tinydl" / "backends" / "templating.py"
        )
        templating = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(templating)
        written = templating.precompile(Path(self.build_lib))
        self.announce(f"compiled {len(written)} kernel templates", level=2)


setup(cmdclass={"build_py": BuildPy})
