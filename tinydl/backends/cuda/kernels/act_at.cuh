// The activations of a generic kernel's epilogue, coded at launch (conv.py's RT_CODES).
// Activation `code` on r (a, b: its parameters; s: a PRelu slope), as the epilogue templates
// write each: one function for every epilogue, so the layers of a plan share this kernel.
__device__ __noinline__ float act_at(int code, float r, float a, float b, float s) {
    switch (code) {
    case {{ CODES.Relu }}: return r < 0.0f ? 0.0f : r;
    case {{ CODES.Clip }}: r = r < a ? a : r; return r > b ? b : r;  // (an absent bound: inf)
    case {{ CODES.LeakyRelu }}: return leaky_(r, a);
    case {{ CODES.PRelu }}: return leaky_(r, s);
    case {{ CODES.HardSigmoid }}: return hard_sigmoid_(r, a, b);
    case {{ CODES.HardSwish }}: return hard_swish_(r);
    case {{ CODES.Sigmoid }}: return sigmoid_(r);
    case {{ CODES.Tanh }}: return tanhf(r);
    case {{ CODES.SiLU }}: return silu_(r);
    default: return r;
    }
}
