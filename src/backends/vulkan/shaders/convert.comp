// dst = src rounded to dst's type (float32 <-> float16; round to nearest even on every driver we know).
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
#ifdef SRC_F16
#define Src F16s
#else
#define Src F32s
#endif
#ifdef DST_F16
#define Dst F16s
#define st_dst st_f16
#else
#define Dst F32s
#define st_dst st_f32
#endif
layout(push_constant) uniform Params { Src src; Dst dst; uint n; } p;
void main() {
    FOR_EACH_ELEMENT(i, p.n) st_dst(p.dst, i, ld(p.src, i));
}
