"""Element types of the IR: NumPy names, with the ONNX and safetensors spellings mapped in."""

import numpy as np

DTYPES: dict[str, np.dtype] = {
    name: np.dtype(name)
    for name in (
        "float32",
        "float16",
        "float64",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "bool",
    )
}

# safetensors dtype tags (the container's own spelling).
SAFETENSORS: dict[str, str] = {
    "float32": "F32",
    "float16": "F16",
    "float64": "F64",
    "int8": "I8",
    "int16": "I16",
    "int32": "I32",
    "int64": "I64",
    "uint8": "U8",
    "uint16": "U16",
    "uint32": "U32",
    "uint64": "U64",
    "bool": "BOOL",
}

# ONNX TensorProto.DataType codes.
ONNX_CODES: dict[int, str] = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
}
ONNX_NAMES: dict[str, int] = {v: k for k, v in ONNX_CODES.items()}


_NAMES: dict = {}  # dtype-like -> its name: NumPy's dtype.name is Python code, 2 µs a call


def dtype_name(dtype) -> str:
    """Canonical IR name of a NumPy dtype (raises KeyError for types the IR does not carry)."""
    try:
        return _NAMES[dtype]
    except (KeyError, TypeError):  # (TypeError: an unhashable dtype-like)
        pass
    name = np.dtype(dtype).name
    if name not in DTYPES:
        raise KeyError(name)
    if len(_NAMES) < 256:
        try:
            _NAMES[dtype] = name
        except TypeError:
            pass
    return name
