"""Layering: lower packages import nothing above them (read from the source with ast, so an
import inside a function counts as much as one at the top)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "tinydl"

# What tinydl/ir may import of tinydl: itself and errors.py, nothing above.
IR_ALLOWED = ("tinydl.ir", "tinydl.errors")


def imported_modules(path: Path, root: Path = ROOT) -> set[str]:
    """Every module `path` (a file under package folder `root`) imports: absolute names,
    relative imports resolved, "from a import b" as both a and a.b."""
    package = ".".join(path.relative_to(root.parent).with_suffix("").parts)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def within(name: str, packages) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


IR_MODULES = sorted((ROOT / "ir").rglob("*.py"))


@pytest.mark.parametrize("path", IR_MODULES, ids=[p.name for p in IR_MODULES])
def test_ir_imports_nothing_above_it(path):
    tinydl = {n for n in imported_modules(path) if within(n, ("tinydl",)) and n != "tinydl"}
    above = sorted(n for n in tinydl if not within(n, IR_ALLOWED))
    assert not above, f"{path.relative_to(ROOT.parent)} imports {above}"


def test_component_does_not_import_the_component_library():
    names = imported_modules(ROOT / "pipeline" / "component.py")
    library = sorted(n for n in names if within(n, ("tinydl.pipeline.components",)))
    assert not library, f"pipeline/component.py imports {library} (names resolve in config.py)"


def test_the_check_sees_imports_inside_functions(tmp_path):
    """The walk finds a function-local import, and resolves relative ones."""
    pkg = tmp_path / "tinydl" / "ir"
    pkg.mkdir(parents=True)
    module = pkg / "m.py"
    module.write_text("def f():\n    from tinydl.ops import schema_of\n    from .. import passes\n")
    names = imported_modules(module, tmp_path / "tinydl")
    assert {"tinydl.ops", "tinydl.ops.schema_of", "tinydl.passes"} <= names
