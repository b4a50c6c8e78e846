"""Op registry: every op's schema, shape inference and NumPy reference, keyed by its ONNX name.

Importing this package registers all op modules. `validate(graph)` checks a graph against it.
"""

from tinydl.ops import (  # noqa: F401  (imported for their registrations)
    activation,
    control,
    conv,
    detection,
    elementwise,
    fused,
    geometry,
    indexing,
    logic,
    matmul,
    mediapipe,
    norm,
    pool,
    recurrent,
    reduce,
    resize,
    shape,
)
from tinydl.ops.base import (
    REGISTRY,
    Attr,
    OpSchema,
    TensorType,
    infer_graph,
    op,
    schema_of,
    validate,
)

__all__ = [
    "REGISTRY",
    "Attr",
    "OpSchema",
    "TensorType",
    "infer_graph",
    "op",
    "schema_of",
    "validate",
]
