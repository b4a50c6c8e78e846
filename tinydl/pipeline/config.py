"""Apps from files: YAML, or a Markdown document (the seed framework's form). Both give the same
spec, which `build_app` turns into an App.

YAML:

    app: demo                      # name (default: the file's stem)
    executor: thread               # default executor: thread | process | ray
    ray: {address: auto}           # ray.init's arguments (executor ray); optional
    capacity: 8                    # default queue capacity
    flow_limit: 2                  # frames in flight per stream (each source's); optional
    flow_policy: wait              # at the limit: wait | drop-oldest
    switch_interval_ms: 0.5        # Python's GIL switch interval while running (null: as is)
    busy_poll_us: 0                # worker processes poll this long before sleeping
    vars: {frames: 100}            # ${frames} anywhere below is replaced (--set overrides)
    components:
      src: {type: SyntheticSource, options: {count: "${frames}"}, instances: 2}
      small: {type: Resize, options: {width: 32}, executor: process, timeout: 5}
      # cpus: [0, 1], gpus: [cuda:0]: cores and GPUs per instance (Ray: placement bundles)
      out: {type: Collect}
    connections:
      - src -> small                               # one-to-one (ports may be left out)
      - "small.out -> out.in (policy: keep-latest, capacity: 1)"  # quoted: it holds ": "
      - {from: small, to: out, policy: drop-oldest}  # the same as a mapping
      # "a -> b, c" fans out; "a, b -> c" merges; w[1] names an instance; collect: true

Markdown: the H1 is the app's name; "## Settings" and "## Variables" are lists of `key: value`;
"## Components" is a table with columns name, type, options (a YAML mapping without braces),
and optionally instances, executor, timeout, flow_limit, flow_policy, cpus, gpus;
"## Connections" is a list of edges as above.
Other sections and text are documentation. `${here}` is the file's folder.

A component type is a class name (the library's, or any imported Component subclass) or an
import path, `module:Class`; a module in a `.py` file next to the app file is found without
PYTHONPATH (the folder joins `sys.path` at its end, so installed packages win, and worker
processes inherit it).
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any

from tinydl.pipeline.app import App
from tinydl.pipeline.component import Component
from tinydl.pipeline.errors import PipelineError

_EDGE = re.compile(r"^(?P<src>[^>]+?)\s*->\s*(?P<dst>[^(]+?)\s*(?:\((?P<opts>.*)\))?\s*$")
_VAR = re.compile(r"\$\{(\w+)\}")
_EDGE_KEYS = {"capacity", "policy", "max_age", "dispatch", "collect"}
_SECTIONS = {
    "setting": "settings",
    "var": "variables",
    "component": "components",
    "connection": "connections",
    "edge": "connections",
}
# A component's settings beside its type and options (YAML keys, Markdown table columns).
_COMPONENT_SETTINGS = (
    "instances",
    "executor",
    "timeout",
    "max_restarts",
    "flow_limit",
    "flow_policy",
    "in_flight",
    "cpus",
    "gpus",
)
_COMPONENT_KEYS = {"type", "options", *_COMPONENT_SETTINGS}


# -- component types by name ------------------------------------------------------------------


def component_class(name: str, folder: str | Path | None = None) -> type[Component]:
    """A component class by its registered name ('Resize': the library's, or any imported
    Component subclass) or import path ('pkg.mod:Class'), its module looked for in `folder` (the
    app file's) too."""
    import tinydl.pipeline.components  # noqa: F401  (registers the library)

    if name in Component.registry:
        return Component.registry[name]
    module, _, attr = name.replace(":", ".").rpartition(".")
    if module:
        if folder is not None and str(folder) not in sys.path:
            sys.path.append(str(folder))
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise PipelineError(f"component type {name!r}: cannot import it ({exc})") from None
        if isinstance(cls, type) and issubclass(cls, Component):
            return cls
        raise PipelineError(f"component type {name!r} is not a Component subclass")
    known = ", ".join(sorted(Component.registry))
    raise PipelineError(
        f"unknown component type {name!r}: expected one of {known}, "
        "or an import path such as 'mypackage.module:MyComponent'"
    )


def build_component(
    type_: str, options: dict[str, Any] | None = None, folder: str | Path | None = None
) -> Component:
    """Instantiate a component from its type name and options, naming a bad option clearly."""
    cls = component_class(type_, folder)
    options = dict(options or {})
    params = inspect.signature(cls).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        unknown = [k for k in options if k not in params]
        if unknown:
            raise PipelineError(
                f"{cls.__name__}: unknown option(s) {unknown}; its options are {list(params)}"
            )
    try:
        return cls(**options)
    except TypeError as exc:
        raise PipelineError(f"{cls.__name__}: {exc}") from None


def _yaml():
    try:
        import yaml
    except ImportError:
        raise PipelineError("app files need PyYAML: pip install pyyaml") from None
    return yaml


def load_app(path: str | Path, variables: dict[str, Any] | None = None) -> App:
    """An App from a .yaml/.yml or .md file; `variables` override the file's vars."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PipelineError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if path.suffix.lower() in (".md", ".markdown"):
        spec = parse_markdown(text, path)
    else:
        try:
            spec = _yaml().safe_load(text)
        except _yaml().YAMLError as exc:
            raise PipelineError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(spec, dict):
        raise PipelineError(f"{path}: expected a mapping with 'components' and 'connections'")
    spec.setdefault("app", path.stem)
    # A value set for a variable the app neither declares nor uses is a typo: say so.
    known = set(spec.get("vars") or {}) | set(re.findall(r"\$\{(\w+)\}", text))
    unknown = sorted(set(variables or {}) - known)
    if unknown:
        raise PipelineError(
            f"{path}: no variable {', '.join(unknown)} in this app; it has {sorted(known)}"
        )
    app = build_app(spec, {"here": str(path.resolve().parent), **(variables or {})}, path)
    app.source = (str(path), dict(variables or {}))  # what a profile's cache key hashes
    return app


def _substitute(value: Any, variables: dict[str, Any], where: str) -> Any:
    if isinstance(value, dict):
        return {k: _substitute(v, variables, where) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, variables, where) for v in value]
    if not isinstance(value, str):
        return value

    def lookup(name: str) -> Any:
        if name not in variables:
            raise PipelineError(
                f"{where}: unknown variable ${{{name}}}; known: {sorted(variables)}"
            )
        return variables[name]

    whole = _VAR.fullmatch(value)
    if whole:  # "${n}" alone keeps the variable's type (an int stays an int)
        return lookup(whole[1])
    return _VAR.sub(lambda m: str(lookup(m[1])), value)


def build_app(
    spec: dict[str, Any], variables: dict[str, Any] | None = None, source: Any = "app"
) -> App:
    """An App from a spec (the parsed YAML, or what parse_markdown gives); `source` is the app
    file's Path when there is one (its folder holds modules of components)."""
    unknown = set(spec) - {
        "app",
        "executor",
        "capacity",
        "app_id",
        "stop_on_error",
        "flow_limit",
        "flow_policy",
        "ray",
        "switch_interval_ms",
        "busy_poll_us",
        "vars",
        "components",
        "connections",
        "description",
    }
    if unknown:
        raise PipelineError(f"{source}: unknown top-level key(s) {sorted(unknown)}")
    variables = {**(spec.get("vars") or {}), **(variables or {})}
    spec = {k: _substitute(v, variables, str(source)) for k, v in spec.items() if k != "vars"}
    app = App(
        str(spec["app"]),
        executor=spec.get("executor", "thread"),
        capacity=int(spec.get("capacity", 8)),
        app_id=spec.get("app_id"),
        stop_on_error=bool(spec.get("stop_on_error", False)),
        flow_limit=spec.get("flow_limit"),
        flow_policy=spec.get("flow_policy", "wait"),
        ray=spec.get("ray"),
        switch_interval_ms=spec.get("switch_interval_ms", 0.5),
        busy_poll_us=float(spec.get("busy_poll_us", 0.0)),
    )
    components = spec.get("components") or {}
    if isinstance(components, list):  # [{name: ..., type: ...}, ...]
        components = {
            c.get("name"): {k: v for k, v in c.items() if k != "name"} for c in components
        }
    if not components:
        raise PipelineError(f"{source}: no components")
    folder = source.resolve().parent if isinstance(source, Path) else None
    for name, c in components.items():
        where = f"{source}: component {name!r}"
        if not isinstance(c, dict) or "type" not in c:
            raise PipelineError(f"{where}: expected a mapping with a 'type'")
        bad = set(c) - _COMPONENT_KEYS
        if bad:
            raise PipelineError(
                f"{where}: unknown key(s) {sorted(bad)}; expected {sorted(_COMPONENT_KEYS)}"
            )
        try:
            component = build_component(str(c["type"]), c.get("options") or {}, folder)
            app.add(
                str(name),
                component,
                executor=c.get("executor"),
                timeout=c.get("timeout"),
                instances=int(c.get("instances", 1)),
                max_restarts=int(c.get("max_restarts", 3)),
                flow_limit=c.get("flow_limit"),
                flow_policy=c.get("flow_policy"),
                in_flight=int(c.get("in_flight", 1)),
                cpus=c.get("cpus"),
                gpus=c.get("gpus"),
            )
        except PipelineError as exc:
            raise PipelineError(f"{where}: {exc}") from None
    for i, edge in enumerate(spec.get("connections") or []):
        where = f"{source}: connection {i + 1}"
        src, dst, opts = _edge(edge, where)
        bad = set(opts) - _EDGE_KEYS
        if bad:
            raise PipelineError(
                f"{where}: unknown option(s) {sorted(bad)}; expected {sorted(_EDGE_KEYS)}"
            )
        try:
            app.connect(src, dst, **opts)
        except PipelineError as exc:
            raise PipelineError(f"{where}: {exc}") from None
    return app


def _edge(edge: Any, where: str) -> tuple[Any, Any, dict[str, Any]]:
    if isinstance(edge, dict):
        opts = {k: v for k, v in edge.items() if k not in ("from", "to")}
        if "from" not in edge or "to" not in edge:
            raise PipelineError(f"{where}: a mapping needs 'from' and 'to'")
        return edge["from"], edge["to"], opts
    if not isinstance(edge, str):
        raise PipelineError(f"{where}: expected 'a -> b' or a mapping, got {edge!r}")
    m = _EDGE.match(edge.strip())
    if not m:
        raise PipelineError(
            f"{where}: cannot read {edge!r}; expected 'a.out -> b.in' with an "
            "optional '(capacity: 4, policy: drop-oldest)'"
        )
    opts = _flow_mapping(m["opts"], where) if m["opts"] else {}
    ends = [[x.strip() for x in m[k].split(",") if x.strip()] for k in ("src", "dst")]
    return (*(e[0] if len(e) == 1 else e for e in ends), opts)


def _flow_mapping(text: str, where: str) -> dict[str, Any]:
    text = text.strip()
    if not text:
        return {}
    try:
        value = _yaml().safe_load("{" + text + "}")
    except _yaml().YAMLError as exc:
        raise PipelineError(f"{where}: cannot read options {text!r}: {exc}") from None
    if not isinstance(value, dict):
        raise PipelineError(f"{where}: options {text!r} are not key: value pairs")
    return value


# -- Markdown ------------------------------------------------------------------------------------


def _cells(line: str) -> list[str]:
    return [c.strip().strip("`").strip() for c in line.strip().strip("|").split("|")]


def parse_markdown(text: str, source: Any = "app.md") -> dict[str, Any]:
    """The spec of an app written as Markdown (see the module docstring)."""
    spec: dict[str, Any] = {"components": {}, "connections": [], "vars": {}}
    section = None
    header: list[str] | None = None
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        where = f"{source}:{n}"
        heading = re.match(r"^(#+)\s+(.*)$", line)
        if heading:
            title = heading[2].strip().lower()
            if len(heading[1]) == 1 and "app" not in spec:
                spec["app"] = heading[2].strip().strip("`")
            section = next((v for k, v in _SECTIONS.items() if title.startswith(k)), None)
            header = None
            continue
        item = re.match(r"^[-*+]\s+(.*)$", line)
        if section in ("settings", "variables") and item:
            pair = _flow_mapping(item[1].replace("`", ""), where)
            (spec if section == "settings" else spec["vars"]).update(pair)
        elif section == "connections" and item:
            spec["connections"].append(item[1].replace("`", "").strip())
        elif section == "components" and line.startswith("|"):
            cells = _cells(line)
            if header is None:
                header = [c.lower() for c in cells]
                if "name" not in header or "type" not in header:
                    raise PipelineError(
                        f"{where}: the components table needs 'name' and "
                        f"'type' columns, got {header}"
                    )
            elif not all(set(c) <= set("-: ") for c in cells):
                row = dict(zip(header, cells, strict=False))
                entry: dict[str, Any] = {
                    "type": row["type"],
                    "options": _flow_mapping(row.get("options", ""), where),
                }
                for key in _COMPONENT_SETTINGS:
                    if row.get(key):
                        entry[key] = _flow_mapping(f"v: {row[key]}", where)["v"]
                spec["components"][row["name"]] = entry
    return spec
