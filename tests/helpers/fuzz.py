"""The fuzzers' shared parts: values that break code which trusts numbers from a file, byte-level
mutations, one-place edits of a JSON document, and running one case (load, then compile for the
cpu backend) under a time limit and a memory cap. Used by test_fuzz.py and
test_fuzz_importers.py."""

from __future__ import annotations

import contextlib
import faulthandler
import json
import math
import random
import resource
import signal
import traceback
from pathlib import Path

import tinydl
from tinydl.ops import REGISTRY

CASE_SECONDS = 10
# Extra address space a case may use; past it an allocation fails instead of swapping CI to death.
MEMORY_HEADROOM = 4 << 30

# Values that break code which trusts numbers from a file.
# fmt: off
INTERESTING_INTS = [
    0, 1, -1, 2, 3, 4, 7, 255, 65536, 2**31 - 1, 2**31, -(2**31), 2**32, 2**40, 2**53,
    2**63 - 1, -(2**63), 2**64, 10**30, -(10**30), 10**400,
]
INTERESTING_FLOATS = [0.0, -0.0, 0.5, -1.5, 1e-45, 1e308, -1e308, math.inf, -math.inf, math.nan]
INTERESTING_STRINGS = [
    "", "x", "Bogus", "__metadata__", "$tensor", "F32", "I64", "BF16", "\u00e9\u0000", "a" * 300,
]
# Spellings of string attributes that ops branch on.
MODE_STRINGS = [
    "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "nearest", "linear", "cubic", "constant",
    "reflect", "edge", "wrap", "DCR", "CRD", "asymmetric", "align_corners", "tf_crop_and_resize",
    "half_pixel", "pytorch_half_pixel", "floor", "ceil", "round_prefer_ceil", "not_larger", "",
]
RANDOM_VALUES = [
    None, True, False, 0, -1, 1.5, "", "x", [], {}, [1, 2], [[1]], {"$tensor": "nope"}, {"a": 1},
]
# fmt: on


# -- byte mutations -----------------------------------------------------------------------------


def flip_bits(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    out = bytearray(data)
    spots = [(rng.randrange(len(out)), rng.randrange(8)) for _ in range(rng.randint(1, 4))]
    for pos, bit in spots:
        out[pos] ^= 1 << bit
    return f"flip bits {spots}", bytes(out)


def overwrite_run(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    out = bytearray(data)
    pos, run = rng.randrange(len(out)), rng.randint(1, 16)
    junk = bytes(rng.choice([0, 0xFF, rng.randrange(256)]) for _ in range(run))
    out[pos : pos + run] = junk[: len(out) - pos]
    return f"overwrite {pos}: {junk.hex()}", bytes(out)


def truncate(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    n = rng.choice(
        [rng.randrange(len(data)), rng.randrange(min(len(data), 64)), len(data) - rng.randint(1, 8)]
    )
    return f"truncate to {n} of {len(data)}", data[: max(n, 0)]


def insert_run(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    pos = rng.randrange(len(data) + 1)
    junk = rng.randbytes(rng.randint(1, 32))
    if rng.random() < 0.5:
        start = rng.randrange(len(data))
        junk = data[start : start + rng.randint(1, 64)]  # a copied run looks like valid structure
    return f"insert {len(junk)} bytes at {pos}: {junk[:16].hex()}", data[:pos] + junk + data[pos:]


def delete_run(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    pos = rng.randrange(len(data))
    run = rng.randint(1, 64)
    return f"delete {run} bytes at {pos}", data[:pos] + data[pos + run :]


BYTE_MUTATIONS = [flip_bits, overwrite_run, truncate, insert_run, delete_run]


# -- JSON edits --------------------------------------------------------------------------------


def json_paths(obj, path=()):
    """Every location inside a JSON document, as a tuple of keys."""
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from json_paths(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from json_paths(v, (*path, i))


def json_get(obj, path):
    for k in path:
        obj = obj[k]
    return obj


def json_set(obj, path, value):
    json_get(obj, path[:-1])[path[-1]] = value


def json_scalars(obj, kind):
    return [
        v
        for p in json_paths(obj)
        if isinstance(v := json_get(obj, p), kind) and not isinstance(v, bool)
    ]


def mutate_json(rng: random.Random, doc) -> str:
    """Change one place in `doc` (in place) to a value a sloppy reader might trust."""
    paths = [p for p in json_paths(doc) if p]
    path = rng.choice(paths)
    old = json_get(doc, path)
    strings = json_scalars(doc, str) + sorted(REGISTRY) + INTERESTING_STRINGS
    numbers = json_scalars(doc, int | float) + INTERESTING_INTS + INTERESTING_FLOATS
    choice = rng.randrange(7)
    if choice == 0 or (choice == 1 and not isinstance(old, str | int | float)):
        new = rng.choice(RANDOM_VALUES)
    elif isinstance(old, str):
        new = rng.choice(strings)
    elif isinstance(old, int | float) and not isinstance(old, bool):
        new = rng.choice(numbers)
    elif choice == 2:
        parent = json_get(doc, path[:-1])
        if isinstance(parent, dict):
            del parent[path[-1]]
        else:
            del parent[path[-1]]
        return f"delete {list(path)}"
    elif choice == 3 and isinstance(json_get(doc, path[:-1]), list):
        json_get(doc, path[:-1]).insert(path[-1], json.loads(json.dumps(old)))
        return f"duplicate {list(path)}"
    elif choice == 4:
        other = rng.choice(paths)
        if other[: len(path)] == path or path[: len(other)] == other:
            new = rng.choice(RANDOM_VALUES)
        else:
            a, b = json.loads(json.dumps(old)), json.loads(json.dumps(json_get(doc, other)))
            json_set(doc, path, b)
            json_set(doc, other, a)
            return f"swap {list(path)} <-> {list(other)}"
    elif choice == 5 and isinstance(old, list):
        old.append(rng.choice(numbers + strings))
        return f"append to {list(path)}"
    else:
        new = rng.choice(numbers + strings + RANDOM_VALUES)
    json_set(doc, path, new)
    return f"set {list(path)} = {str(new)[:40]!r} (was {str(old)[:40]!r})"


# -- running a case ----------------------------------------------------------------------------


class CaseTimeout(BaseException):
    """Raised by the alarm; a BaseException so no `except Exception` in tinydl can swallow it."""


@contextlib.contextmanager
def time_limit(seconds: float):
    def on_alarm(signum, frame):
        raise CaseTimeout(f"case took more than {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    # A hang inside C code never returns to Python to see the alarm: dump stacks and exit then.
    faulthandler.dump_traceback_later(seconds * 3, exit=True)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        faulthandler.cancel_dump_traceback_later()


@contextlib.contextmanager
def memory_cap(headroom: int):
    """Cap the address space so a huge allocation raises MemoryError instead of OOM-killing CI."""
    statm = Path("/proc/self/statm")
    if not statm.exists():  # not Linux: run uncapped
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    used = int(statm.read_text().split()[0]) * resource.getpagesize()
    cap = used + headroom
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def ran_out_of_memory(exc: BaseException) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, MemoryError):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def check_case(path: Path) -> tuple[bool, str | None]:
    """(whether the model loaded, None when the case behaves or else what went wrong)."""
    try:
        with time_limit(CASE_SECONDS):
            try:
                graph = tinydl.load(path)
            except tinydl.InvalidModelError as exc:
                if ran_out_of_memory(exc):
                    return False, "refused only after running out of memory:\n" + format_exception(
                        exc
                    )
                return False, None
            try:
                tinydl.compile(graph, backends=("numpy",))
            except tinydl.TinyDLError:
                pass
    except CaseTimeout as exc:
        return False, "hang:\n" + format_exception(exc)
    except Exception as exc:  # the point of the test: report anything that is not ours
        return False, f"{type(exc).__name__} escaped:\n" + format_exception(exc)
    return True, None


def format_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)[-12:])
