"""wgpu-py's C types parsed in one go when the webgpu backend starts.

wgpu-py talks to wgpu-native through cffi in ABI mode, and cffi parses each C type string the
first time it meets it ("WGPUBufferDescriptor *", ...) with pycparser — re-reading a preamble of
every typedef of webgpu.h (about 440) each time: 12 ms a type on a 2-core VM, about 70 types
before a session's first result, most of a second of a cold start. `prewarm()` parses the
types wgpu-py uses for our work in one pycparser pass (the preamble once) and puts the results
where cffi's own lookup finds them, so wgpu-py's later calls hit cffi's cache.

Unknown names (another wgpu version) are left out; any failure leaves cffi as it was (it then
parses lazily, as without this).
"""

from __future__ import annotations

import logging
import re

log = logging.getLogger(__name__)

# The C types wgpu-py 0.32 parses while tinydl compiles, runs, reads back, draws and shows.
TYPES = (
    "WGPUAdapterInfo *",
    "WGPUAdapter[]",
    "WGPUBindGroupDescriptor *",
    "WGPUBindGroupEntry *",
    "WGPUBindGroupEntry[]",
    "WGPUBufferDescriptor *",
    "WGPUBufferMapCallbackInfo *",
    "WGPUChainedStruct *",
    "WGPUChainedStruct * ",
    "WGPUColor *",
    "WGPUColorTargetState *",
    "WGPUColorTargetState[]",
    "WGPUCommandBufferDescriptor *",
    "WGPUCommandBuffer[]",
    "WGPUCommandEncoderDescriptor *",
    "WGPUComputePassDescriptor *",
    "WGPUComputePipelineDescriptor *",
    "WGPUComputeState *",
    "WGPUDeviceDescriptor *",
    "WGPUDeviceExtras *",
    "WGPUDeviceLostCallbackInfo *",
    "WGPUExtent3D *",
    "WGPUFeatureName[]",
    "WGPUFragmentState *",
    "WGPUInstanceDescriptor *",
    "WGPULimits *",
    "WGPUMultisampleState *",
    "WGPUNativeLimits *",
    "WGPUOrigin3D *",
    "WGPUPassTimestampWrites *",
    "WGPUPrimitiveState *",
    "WGPUPrimitiveStateExtras *",
    "WGPUQuerySetDescriptor *",
    "WGPUQueueDescriptor *",
    "WGPURenderPassColorAttachment *",
    "WGPURenderPassColorAttachment[]",
    "WGPURenderPassDescriptor *",
    "WGPURenderPipelineDescriptor *",
    "WGPURequestAdapterCallbackInfo *",
    "WGPURequestAdapterOptions *",
    "WGPURequestDeviceCallbackInfo *",
    "WGPUSamplerDescriptor *",
    "WGPUShaderModuleDescriptor *",
    "WGPUShaderSourceWGSL *",
    "WGPUStringView *",
    "WGPUSurfaceCapabilities *",
    "WGPUSurfaceConfiguration *",
    "WGPUSurfaceDescriptor *",
    "WGPUSurfaceSourceXlibWindow *",
    "WGPUSurfaceTexture *",
    "WGPUTexelCopyBufferInfo *",
    "WGPUTexelCopyBufferLayout *",
    "WGPUTexelCopyTextureInfo *",
    "WGPUTextureDescriptor *",
    "WGPUTextureViewDescriptor *",
    "WGPUUncapturedErrorCallbackInfo *",
    "WGPUVertexState *",
    "char []",
    "intptr_t",
    "uint32_t []",
    "uint8_t *",
    "uint8_t []",
    "uintptr_t",
    "void *",
    "void(WGPUDevice const *, WGPUDeviceLostReason, WGPUStringView, void *, void *)",
    "void(WGPUDevice const *, WGPUErrorType, WGPUStringView, void *, void *)",
    "void(WGPULogLevel, WGPUStringView, void *)",
    "void(WGPUMapAsyncStatus, WGPUStringView, void *, void *)",
    "void(WGPURequestAdapterStatus, WGPUAdapter, WGPUStringView, void *, void *)",
    "void(WGPURequestDeviceStatus, WGPUDevice, WGPUStringView, void *, void *)",
)


def prewarm(types=TYPES) -> int:
    """Parse `types` into cffi's type cache of wgpu-py's FFI in one pass; returns how many."""
    try:
        from wgpu.backends.wgpu_native._ffi import ffi

        parser = ffi._parser
        known = {name.split(" ", 1)[1] for name in parser._declarations if " " in name}
        todo = []
        for cdecl in types:
            names = set(re.findall(r"\bWGPU\w+", cdecl))
            if cdecl not in ffi._parsed_types and names <= known:
                todo.append(cdecl)
        if not todo:
            return 0
        source = "\n".join(f"void __tinydl_{i}(\n{c}\n);" for i, c in enumerate(todo))
        with ffi._lock:
            ast = parser._parse(source)[0]
            for cdecl, decl in zip(todo, ast.ext[-len(todo) :], strict=True):
                tp = parser._get_type_and_quals(decl.type.args.params[0].type)[0]
                function = tp.is_raw_function
                if function:
                    tp = tp.as_function_pointer()
                ffi._parsed_types.setdefault(cdecl, (ffi._get_cached_btype(tp), function))
        return len(todo)
    except Exception as exc:  # noqa: BLE001 - an optimization only: cffi parses lazily instead
        log.debug("cffi types not prewarmed: %s", exc)
        return 0
