// Sums and maxima over a workgroup of 256 threads in shared memory (no subgroup operations: see common.glsl).
shared float reduce_scratch[256];

float workgroup_sum(float v) {
    const uint t = gl_LocalInvocationIndex;
    reduce_scratch[t] = v;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) {
        if (t < s) reduce_scratch[t] += reduce_scratch[t + s];
        barrier();
    }
    const float r = reduce_scratch[0];
    barrier();
    return r;
}

float workgroup_max(float v) {
    const uint t = gl_LocalInvocationIndex;
    reduce_scratch[t] = v;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) {
        if (t < s) reduce_scratch[t] = max(reduce_scratch[t], reduce_scratch[t + s]);
        barrier();
    }
    const float r = reduce_scratch[0];
    barrier();
    return r;
}

// Row-per-workgroup kernels index rows over a 2D grid (at most 65535 workgroups along each axis).
uint workgroup_row() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }
