// Included first by every kiln shader. Tensors are reached through buffer device addresses passed in push
// constants (no descriptor sets): a tensor is a typed pointer, an offset into one is host arithmetic.
// Storage is float32 or float16 (GL_EXT_shader_16bit_storage: loads and stores only, the arithmetic is
// float32, so no shaderFloat16 is needed). Reductions use shared memory over the whole
// workgroup, never subgroup operations, so no kernel depends on the subgroup width (8 on lavapipe, 32 on
// NVIDIA, 64 on GCN, 32 or 64 on RDNA).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_16bit_storage : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32s { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer F16s { float16_t v[]; };

// ld(buffer, i) reads either type as float32; st_f32 / st_f16 store (buffer references cannot overload).
#define ld(b, i) float((b).v[i])
void st_f32(F32s b, uint i, float x) { b.v[i] = x; }
void st_f16(F16s b, uint i, float x) { b.v[i] = float16_t(x); }

// 4 values at once (index i a multiple of 4, the address 8 or 16 bytes aligned): ld4_f32 / ld4_f16 (i in elements).
layout(buffer_reference, std430, buffer_reference_align = 16) buffer F32x4s { vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer F16x4s { f16vec4 v[]; };
#define ld4_f32(b, i) (F32x4s(b).v[(i) >> 2])
#define ld4_f16(b, i) vec4(F16x4s(b).v[(i) >> 2])

// Ts is the type of a shader's tensors (T_F16: float16), st its store.
#ifdef T_F16
#define Ts F16s
#define st st_f16
#else
#define Ts F32s
#define st st_f32
#endif

// Elementwise kernels run a grid-stride loop over n elements with 256 threads per workgroup (the host
// dispatches at most 65535 workgroups along x).
#define FOR_EACH_ELEMENT(i, n) \
    for (uint i = gl_GlobalInvocationID.x; i < (n); i += gl_NumWorkGroups.x * 256u)
