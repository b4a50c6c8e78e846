"""Partitioning: fake delegates that claim chosen op sets (ORT's InternalTestingExecutionProvider
idea), split the graph as TFLite's ModifyGraphWithDelegate would; placement, transfers, warnings.
"""

import warnings

import numpy as np
import pytest
from helpers.fakes import FakeBackend
from helpers.models import espcn_onnx

import tinydl as td
from tinydl.backends import register_backend, unregister_backend
from tinydl.backends.partition import HOST, Transfer, partition
from tinydl.ir.graph import Graph, Node, Value
from tinydl.ops import validate

UNARY = ("Relu", "Sigmoid", "Tanh", "Softmax")
BINARY = ("Add", "Mul", "Sub")


@pytest.fixture
def fakes():
    made = []

    def make(name: str, ops: set[str]) -> FakeBackend:
        backend = FakeBackend(name, ops)
        register_backend(backend)
        made.append(name)
        return backend

    yield make
    for name in made:
        unregister_backend(name)


def chain(*ops: str, shape=(2, 3)) -> Graph:
    """x -> op0 -> op1 -> ... -> y; binary ops add the previous value to itself."""
    nodes, prev = [], "x"
    for k, op in enumerate(ops):
        out = "y" if k == len(ops) - 1 else f"v{k}"
        inputs = [prev, prev] if op in BINARY else [prev]
        nodes.append(Node(op, inputs, [out], name=f"{op.lower()}{k}"))
        prev = out
    return validate(Graph([Value("x", "float32", shape)], [Value("y")], nodes))


def placed(placement) -> list[tuple[str, list[str]]]:
    return [(p.backend, [n.name for n in p.nodes]) for p in placement.partitions]


def test_two_delegates_in_priority_order_split_as_tflite(fakes):
    # TFLite: delegate "a" claims relu1 although "b" could run it (first come, first served);
    # "b" then takes what "a" left; cpu runs what nobody claimed.
    a = fakes("a", {"Relu", "Add"})
    b = fakes("b", {"Relu", "Sigmoid", "Mul"})
    g = chain("Add", "Relu", "Sigmoid", "Add", "Tanh", "Mul")
    p = partition(g, [a, b, td.backends.get_backend("numpy")])
    assert placed(p) == [
        ("a", ["add0", "relu1"]),
        ("b", ["sigmoid2"]),
        ("a", ["add3"]),
        ("numpy", ["tanh4"]),
        ("b", ["mul5"]),
    ]
    assert p.refusals["sigmoid2"] == {"a": "a has no Sigmoid kernel"}
    assert p.refusals["tanh4"] == {"a": "a has no Tanh kernel", "b": "b has no Tanh kernel"}
    assert "relu1" not in p.refusals and "add0" not in p.refusals


def test_independent_branches_merge_into_one_partition(fakes):
    # Two branches: TFLite's first subset stops at the cpu node; the fake nodes after it join
    # the first fake subset, since no path between them leaves the fake backend.
    fake = fakes("fake", {"Relu", "Tanh", "Add"})
    g = validate(
        Graph(
            [Value("x", "float32", (2, 3)), Value("z", "float32", (2, 3))],
            [Value("y"), Value("w")],
            [
                Node("Relu", ["x"], ["r"], name="relu"),
                Node("Sigmoid", ["z"], ["s"], name="sigmoid"),
                Node("Tanh", ["s"], ["t"], name="tanh"),
                Node("Add", ["r", "r"], ["y"], name="add"),
                Node("Add", ["t", "t"], ["w"], name="add2"),
            ],
        )
    )
    p = partition(g, [fake, td.backends.get_backend("numpy")])
    assert placed(p) == [("numpy", ["sigmoid"]), ("fake", ["relu", "tanh", "add", "add2"])]


def test_merging_never_creates_a_cycle(fakes):
    # relu -> sigmoid (cpu) -> add <- relu: relu and add cannot share a partition.
    fake = fakes("fake", {"Relu", "Add"})
    g = validate(
        Graph(
            [Value("x", "float32", (4,))],
            [Value("y")],
            [
                Node("Relu", ["x"], ["r"], name="relu"),
                Node("Sigmoid", ["r"], ["s"], name="sigmoid"),
                Node("Add", ["r", "s"], ["y"], name="add"),
            ],
        )
    )
    p = partition(g, [fake, td.backends.get_backend("numpy")])
    assert placed(p) == [("fake", ["relu"]), ("numpy", ["sigmoid"]), ("fake", ["add"])]


def random_graph(rng, n: int) -> Graph:
    values, nodes = ["x"], []
    for k in range(n):
        op = rng.choice(UNARY + BINARY)
        picks = rng.choice(values[-6:], size=2 if op in BINARY else 1)
        out = f"v{k}"
        nodes.append(Node(str(op), [str(v) for v in picks], [out], name=f"n{k}"))
        values.append(out)
    read = {i for node in nodes for i in node.inputs}
    outputs = [Value(v) for v in values[1:] if v not in read]
    order = rng.permutation(n)  # file order is not execution order
    return validate(Graph([Value("x", "float32", (2, 3))], outputs, [nodes[i] for i in order]))


def check_partitions(g: Graph, p, backends) -> None:
    index = {n.name: i for i, n in enumerate(g.nodes)}
    made = {v.name for v in g.inputs}
    for k, part in enumerate(p.partitions):
        # Topologically ordered: everything a partition reads is made before it.
        assert set(part.inputs) <= made, f"partition {k} reads a later value"
        assert [index[n.name] for n in part.nodes] == sorted(index[n.name] for n in part.nodes)
        made |= {o for n in part.nodes for o in n.outputs}
    # First come, first served: each node on the first backend that supports it.
    for node in g.nodes:
        first = next(b for b in backends if b.supports(node, g))
        assert p[node.name] == first.name
    # Maximal: two partitions of one backend always have a path between them through another.
    parts = p.partitions
    producer = {o: k for k, part in enumerate(parts) for n in part.nodes for o in n.outputs}
    succ = [set() for _ in parts]
    for k, part in enumerate(parts):
        for i in part.inputs:
            if i in producer:
                succ[producer[i]].add(k)

    def reach(a: int) -> set[int]:
        seen, todo = set(), list(succ[a])
        while todo:
            k = todo.pop()
            if k not in seen:
                seen.add(k)
                todo += succ[k]
        return seen

    for a in range(len(parts)):
        for b in range(a + 1, len(parts)):
            if parts[a].backend != parts[b].backend:
                continue
            via = any(b in reach(s) for s in succ[a] if s != b)
            assert via, f"partitions {a} and {b} of {parts[a].backend} could merge"


def test_random_graphs_partition_maximal_acyclic_ordered(fakes):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    for trial in range(30):
        ops = list(UNARY + BINARY)
        a = fakes(f"a{trial}", set(rng.choice(ops, size=4, replace=False)))
        b = fakes(f"b{trial}", set(rng.choice(ops, size=4, replace=False)))
        backends = [a, b, td.backends.get_backend("numpy")]
        g = random_graph(rng, int(rng.integers(5, 30)))
        p = partition(g, backends)
        check_partitions(g, p, backends)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = td.compile(g, backends=[a.name, b.name, "numpy"]).run({"x": x})
        want = td.compile(g, backends=("numpy",)).run({"x": x})
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])


def test_min_partition_size_releases_small_partitions(fakes):
    fake = fakes("fake", {"Relu", "Tanh", "Add"})
    g = chain("Relu", "Tanh", "Sigmoid", "Add", "Sigmoid")
    p = partition(g, [fake, td.backends.get_backend("numpy")], min_partition_size=2)
    assert placed(p) == [("fake", ["relu0", "tanh1"]), ("numpy", ["sigmoid2", "add3", "sigmoid4"])]
    assert "fewer than min_partition_size=2" in p.refusals["add3"]["fake"]
    with pytest.raises(ValueError, match="min_partition_size"):
        partition(g, [fake], min_partition_size=0)


def test_transfers_at_boundaries_and_bytes_per_run(fakes, rng):
    # A backend's tensors are in host memory unless it declares a memory of its own.
    fakes("fake", {"Relu", "Tanh"}).memory = "fake"
    g = chain("Relu", "Sigmoid", "Tanh", shape=(4, 8))
    with pytest.warns(UserWarning, match="Sigmoid"):
        sess = td.compile(g, backends=("fake", "numpy"))
    p = sess.placement
    size = 4 * 8 * 4
    assert p.transfers == [
        Transfer("x", HOST, "fake", size),
        Transfer("v0", "fake", HOST, size),
        Transfer("v1", HOST, "fake", size),
        Transfer("y", "fake", HOST, size),
    ]
    assert [type(step).__name__ for step in p.plan] == [
        "Transfer",
        "Partition",
        "Transfer",
        "Partition",
        "Transfer",
        "Partition",
        "Transfer",
    ]
    assert p.bytes_per_run() == 4 * size
    assert "moved per run: 512 bytes in 4 transfer(s)" in p.summary()
    sess.run({"x": rng.standard_normal((4, 8)).astype(np.float32)})
    prof = sess.profile()
    assert prof["bytes_moved"] == 4 * size
    assert [(t["value"], t["src"], t["dst"]) for t in prof["transfers"]] == [
        (t.value, t.src, t.dst) for t in p.transfers
    ]
    sess.run({"x": np.zeros((4, 8), np.float32)}, outputs="device")
    assert sess.profile()["bytes_moved"] == 3 * size  # the output stays on the device


def test_op_no_gpu_backend_supports_warns_or_raises_in_strict_mode(fakes, tmp_path, rng):
    espcn_onnx(tmp_path / "espcn.onnx", 3, rng)
    model = td.load(tmp_path / "espcn.onnx")
    fakes("gpu", {"Conv", "Tanh", "tinydl.FusedConv"})  # no DepthToSpace kernel
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = td.compile(model, backends=("gpu", "numpy"))
    (message,) = [str(w.message) for w in caught]
    assert "DepthToSpace" in message and "'gpu'" in message
    assert placed(sess.placement)[-1][0] == "numpy"
    y = rng.random((1, 1, 8, 10), dtype=np.float32)
    np.testing.assert_allclose(
        sess.run({"y": y})["out"],
        td.compile(model, backends=("numpy",)).run({"y": y})["out"],
        rtol=1e-5,
        atol=1e-6,
    )
    with pytest.raises(td.UnsupportedOpError, match=r"\(DepthToSpace\): gpu: gpu has no Depth"):
        td.compile(model, backends=("gpu", "numpy"), strict=True)


def test_fusion_only_where_the_backend_runs_the_fused_op(fakes, tmp_path, rng):
    espcn_onnx(tmp_path / "espcn.onnx", 3, rng)
    model = td.load(tmp_path / "espcn.onnx")
    fakes("plain", {"Conv", "Tanh", "DepthToSpace"})  # runs Conv and Tanh, not FusedConv
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing may fall back
        sess = td.compile(model, backends=("plain", "numpy"))
    assert sess.placement.counts() == {"plain": 6}
    assert td.compile(model, backends=("numpy",)).placement.counts() == {"numpy": 4}


def test_no_backend_runs_a_node_lists_every_refusal(fakes):
    fake = fakes("fake", {"Relu"})
    g = chain("Relu", "Tanh", "Sigmoid")
    with pytest.raises(td.UnsupportedOpError) as err:
        partition(g, [fake])
    assert "tanh1 (Tanh): fake: fake has no Tanh kernel" in str(err.value)
    assert "sigmoid2 (Sigmoid)" in str(err.value)


def test_unregistering_a_built_in_backend_keeps_it_known():
    """A test (or plug-in) that registers its own instance under a built-in name and removes
    it leaves the built-in usable: a fresh instance is made on next use."""
    from tinydl.backends import BUILT_IN, KNOWN, get_backend, register_backend, unregister_backend
    from tinydl.backends.cpu import CPUBackend

    assert "cuda" in BUILT_IN
    mine = CPUBackend()
    register_backend(mine)
    assert get_backend("numpy") is mine
    unregister_backend("numpy")
    assert "numpy" in KNOWN and get_backend("numpy") is not mine


class ConstantInputs(FakeBackend):
    """Claims a Reshape only when its target shape is known once shapes are (as the GPU
    backends' `constant_inputs` check does), and every other op."""

    def supports(self, node, graph):
        from tinydl.backends.planned import constant_inputs

        return (
            constant_inputs(node, graph) if node.op == "Reshape" else super().supports(node, graph)
        )


def test_partitioning_finds_shape_derived_values_once_per_graph(monkeypatch):
    """A long chain where every other Reshape takes its target from Shape(x) and the others from
    the data (ArgMax): the backend's answers are right, and the producer map is built once for
    the whole partitioning, not once per node asked about."""
    nodes, prev = [], "x"
    for k in range(300):
        nodes.append(Node("Relu", [prev], [f"r{k}"], {}, f"relu{k}"))
        if k % 2:
            nodes.append(Node("ArgMax", [f"r{k}"], [f"t{k}"], {"axis": 1, "keepdims": 0}))
        else:
            nodes.append(Node("Shape", [f"r{k}"], [f"s{k}"]))
            nodes.append(Node("Identity", [f"s{k}"], [f"t{k}"]))
        nodes.append(Node("Reshape", [f"r{k}", f"t{k}"], [f"y{k}"], {}, f"reshape{k}"))
        prev = f"y{k}"
    graph = validate(Graph([Value("x", "float32", (2, 3))], [Value(prev, "float32")], nodes))
    calls = []
    original = Graph.producers
    monkeypatch.setattr(Graph, "producers", lambda g: calls.append(1) or original(g))
    backend = ConstantInputs("fake", {"Relu", "Shape", "Identity", "ArgMax"})
    placement = partition(graph, [backend, FakeBackend("rest", {"Reshape"})])
    assert len(calls) == 1
    refused = {n for n, b in placement.nodes.items() if b == "rest"}
    assert refused == {f"reshape{k}" for k in range(1, 300, 2)}
    assert "computed at run time" in placement.fallbacks()["reshape1"]["fake"]


def test_summary_lists_whole_op_names_never_cut():
    """Many op types in one partition: the summary shows whole entries and counts the rest."""
    ops = ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Exp", "Softsign", "Softplus", "Reciprocal"]
    names = ["x"] + [f"v{i}" for i in range(len(ops))]
    graph = validate(
        Graph(
            [Value("x", "float32", (1, 8))],
            [Value(names[-1], "float32", None)],
            [Node(op, [a], [b]) for op, a, b in zip(ops, names[:-1], names[1:], strict=True)],
        )
    )
    text = td.compile(graph, backends=("numpy",)).placement.summary()
    line = next(ln for ln in text.splitlines() if "nodes" in ln)
    assert line.endswith("+3 more ops")
    listed = line.split("nodes", 1)[1].split(", +")[0].strip().split(", ")
    assert all(entry.split()[0] in ops and entry.split()[1] == "1" for entry in listed)


def test_cost_mode_keeps_a_cpu_only_ops_neighbours_on_the_cpu(rng):
    """A GPU-capable node on each side of a CPU-only one: the support-greedy placement pays
    four copies (in, out, in, out); with copies dear and the work small, partition="cost"
    keeps the whole chain on the CPU. With copies cheap and the CPU slow, it keeps the
    greedy placement. Results equal either way."""
    from helpers.fakes import FakeGPU

    from tinydl.backends.cost import BackendCost

    register_backend(FakeGPU("fgpu", {"Relu", "Sigmoid"}))
    try:
        g = chain("Relu", "Tanh", "Sigmoid", shape=(256, 256))
        x = rng.standard_normal((256, 256)).astype(np.float32)
        greedy = td.compile(g, backends=("fgpu", "numpy"))
        assert placed(greedy.placement) == [
            ("fgpu", ["relu0"]),
            ("numpy", ["tanh1"]),
            ("fgpu", ["sigmoid2"]),
        ]
        dear = {
            "fgpu": BackendCost(
                1e-5, 1e12, 1e12, transfer_latency_s=1e-3, transfer_bytes_per_s=1e9
            ),
            "numpy": BackendCost(1e-5, 1e9, 1e10),
        }
        cost = td.compile(g, backends=("fgpu", "numpy"), partition="cost", costs=dear)
        assert placed(cost.placement) == [("numpy", ["relu0", "tanh1", "sigmoid2"])]
        plan = cost.cost_assignment
        assert plan.predicted_s < plan.greedy_s and plan.greedy_s > 4e-3  # four copies
        assert cost.placement.refusals["relu0"]["fgpu"].startswith("cost: runs on numpy")
        assert cost.placement.predicted["tanh1"] > 0 and not greedy.placement.predicted
        np.testing.assert_array_equal(cost.run({"x": x})["y"], greedy.run({"x": x})["y"])
        report = greedy.cost_report()
        assert [r["kind"] for r in report].count("transfer") == 4
        assert all(r["predicted_s"] is None and r["measured_s"] >= 0 for r in report)
        (row,) = cost.cost_report()
        assert row["kind"] == "partition" and row["predicted_s"] > 0

        cheap = {
            "fgpu": BackendCost(
                1e-6, 1e13, 1e12, transfer_latency_s=1e-6, transfer_bytes_per_s=1e11
            ),
            "numpy": BackendCost(1e-5, 1e6, 1e8),
        }
        kept = td.compile(g, backends=("fgpu", "numpy"), partition="cost", costs=cheap)
        assert placed(kept.placement) == placed(greedy.placement)
        assert kept.cost_assignment.predicted_s == pytest.approx(kept.cost_assignment.greedy_s)
        with pytest.raises(td.TinyDLError, match="partition must be one of"):
            td.compile(g, backends=("fgpu", "numpy"), partition="fastest")
    finally:
        unregister_backend("fgpu")


def test_calibrated_costs_of_a_host_backend():
    from tinydl.backends.cost import calibrate

    cost = calibrate(td.backends.get_backend("numpy"))
    assert cost is calibrate(td.backends.get_backend("numpy"))  # once per process
    assert 0 < cost.launch_s < 1e-2 and cost.flops_per_s > 1e6 and cost.bytes_per_s > 1e6
    assert cost.transfer_seconds(1 << 20) == 0.0  # host memory: nothing to move
