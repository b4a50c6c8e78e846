"""Helpers shared by the test modules: op cases and the op checker, model builders, fake
backends and contexts, and the pieces several test files build on.

Test modules import from here (`from helpers.models import espcn`), never from one another.
pytest puts tests/ on sys.path (rootdir conftest.py, default "prepend" import mode), which makes
this package importable as `helpers`. Nothing is imported here, so a module of it (cuda_fake.py,
say) can be used where pytest is not installed (.ci/smoke_installed.py).
"""
