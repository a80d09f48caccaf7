// A hand-written f16 GEMM for a_in_registers.py (C = A x B, square SIZE, row-major, f32 accumulators), with the
// interface of retarget's matmul kernel (bindings 0, 1, 2; push constants: the element bases). 128x128 output
// tiles, 4 subgroups of 64x64 (4x4 16x16x16 cooperative matrices), as shipped; but A is never staged: each
// invocation loads its own elements of the A fragments from the storage buffer into registers, RING k-slices
// ahead, and puts them into the fragments element by element. Only B goes through workgroup memory, in BCOPIES
// copies of TK-deep steps (BCOPIES 2: one barrier a step).
//
// The element order is the driver's (implementation-defined in VK_KHR_cooperative_matrix): this kernel assumes
// the order the layout probe read off NVIDIA's driver (580.159.04, H100): lane l = 4g + c holds row g at columns
// 2c, 2c + 1, 2c + 8, 2c + 9 in elements 0-3, then row g + 8 at the same columns in elements 4-7.
// Within each 16-deep k-slice, k is permuted so that those four columns are adjacent in memory (physical
// column 4c + j), one 8-byte load a row; B's rows are staged under the same permutation, so the product is
// unchanged. PACKED_A 1 reads A from a buffer packed by the harness, each load's 32 lanes 256 contiguous bytes
// (A's [64-row block][k-slice][fragment row i][half h][lane] words) instead of 32 bytes of each of 8 rows. LAYOUT_PROBE 1 builds instead a kernel that writes each lane's A and B fragment elements, loaded from
// A and B, to C's first 512 elements, to read the order off a device.
#version 460
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require

#ifndef LAYOUT_PROBE
#define LAYOUT_PROBE 0
#endif
#ifndef PACKED_BOTH
#define PACKED_BOTH 0
#endif
#ifndef LOAD_AFTER
#define LOAD_AFTER 0
#endif

layout(local_size_x = 128) in;
layout(set = 0, binding = 0) readonly buffer InA { uvec2 a[]; };
layout(set = 0, binding = 0) readonly buffer InAh { float16_t ah[]; };
layout(set = 0, binding = 1) readonly buffer InB { uvec4 b[]; };
layout(set = 0, binding = 1) readonly buffer InBh { float16_t bh[]; };
layout(set = 0, binding = 2) writeonly buffer Out { float16_t c[]; };
layout(push_constant) uniform Bases { uint base_a; uint base_b; uint base_c; };

#define ACC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define FA coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define FB coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define OUT coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

#if LAYOUT_PROBE
void main() {
    uint t = gl_LocalInvocationID.x;
    FA fa;
    FB fb;
    coopMatLoad(fa, ah, base_a, SIZE, gl_CooperativeMatrixLayoutRowMajor);
    coopMatLoad(fb, bh, base_b, SIZE, gl_CooperativeMatrixLayoutRowMajor);
    if (gl_WorkGroupID.x == 0 && t < 32) {
        for (uint e = 0; e < fa.length(); e++) c[base_c + t * fa.length() + e] = fa[e];
        for (uint e = 0; e < fb.length(); e++) c[base_c + 256 + t * fb.length() + e] = fb[e];
    }
}
#elif PACKED_BOTH
// A and B both read from buffers packed in fragment order (the harness packs them): fragment (row block R,
// k-slice S) of A is 32 lanes x 16 bytes at word (R * K / 16 + S) * 32, each lane's 8 elements in the driver's
// order; B's (column block C, k-slice S) likewise. No workgroup memory, no barrier: each subgroup loads its own
// fragments, RING k-slices ahead, one 16-byte load a fragment.
layout(set = 0, binding = 0) readonly buffer InAw { uvec4 aw[]; };
const uint N = SIZE;
const uint K = SIZE;
const uint ALL_SLICES = K / 16;
ACC acc[16];
uvec4 ring_a[RING][4];
uvec4 ring_b[RING][4];
uint a_first, b_first;

void load_slice(uint slice, uint r) {
    [[unroll]] for (uint i = 0; i < 4; i++) {
        ring_a[r][i] = aw[a_first + (i * ALL_SLICES + slice) * 32];
        ring_b[r][i] = b[b_first + (i * ALL_SLICES + slice) * 32];
    }
}

// a fragment of type T from one lane's 16-byte word, its 8 elements in order
#define FROM_WORD(T, name)                                          \
    T name(uvec4 w) {                                               \
        T f;                                                        \
        [[unroll]] for (uint q = 0; q < 4; q++) {                   \
            f16vec2 p = unpackFloat2x16(w[q]);                      \
            f[2 * q] = p.x;                                         \
            f[2 * q + 1] = p.y;                                     \
        }                                                           \
        return f;                                                   \
    }
FROM_WORD(FA, a_fragment)
FROM_WORD(FB, b_fragment)

void main() {
    uint tile = gl_WorkGroupID.x;
    uint m0 = (tile / (N / 128)) * 128, n0 = (tile % (N / 128)) * 128;
    uint t = gl_LocalInvocationID.x;
    uint sg = t / 32, lane = t % 32;
    uint wm = (sg / 2) * 64, wn = (sg % 2) * 64;
    a_first = (base_a >> 3) + (m0 + wm) / 16 * ALL_SLICES * 32 + lane;
    b_first = (base_b >> 3) + (n0 + wn) / 16 * ALL_SLICES * 32 + lane;
    [[unroll]] for (uint q = 0; q < 16; q++) acc[q] = ACC(0.0);
    [[unroll]] for (uint r = 0; r < RING; r++) load_slice(r, r);
    [[dont_unroll]] for (uint s = 0; s < ALL_SLICES; s += RING) {
        [[unroll]] for (uint r = 0; r < RING; r++) {
            FA fa[4];
            FB fb[4];
            [[unroll]] for (uint i = 0; i < 4; i++) {
                fa[i] = a_fragment(ring_a[r][i]);
                fb[i] = b_fragment(ring_b[r][i]);
            }
#if !LOAD_AFTER
            load_slice(min(s + r + RING, ALL_SLICES - 1), r);  // past the end: a harmless reload
#endif
            [[unroll]] for (uint i = 0; i < 4; i++)
                [[unroll]] for (uint j = 0; j < 4; j++)
                    acc[i * 4 + j] = coopMatMulAdd(fa[i], fb[j], acc[i * 4 + j]);
#if LOAD_AFTER  // after the multiplies, so that the fragments may share the ring's registers
            load_slice(min(s + r + RING, ALL_SLICES - 1), r);
#endif
        }
    }
    [[unroll]] for (uint i = 0; i < 4; i++)
        [[unroll]] for (uint j = 0; j < 4; j++) {
            OUT h = OUT(acc[i * 4 + j]);
            coopMatStore(h, c, base_c + (m0 + wm + 16 * i) * N + n0 + wn + 16 * j, N, gl_CooperativeMatrixLayoutRowMajor);
        }
}
#else

const uint N = SIZE;
const uint K = SIZE;
const uint TM = 128;
const uint TN = 128;
const uint STEPS = K / TK;
const uint SLICES = TK / 16;  // k-slices a step
const uint ALL_SLICES = K / 16;
const uint BS = TN / 8 + 1;  // staged rows in uvec4s, padded by 16 bytes
const uint PB = TK * TN / 8 / 128;  // uvec4s each invocation stages a step
shared uvec4 sb[BCOPIES * TK * BS];

ACC acc[16];
uvec4 rb[PB];
uvec2 ring[RING][8];  // [slice % RING][fragment row i * 2 + half]: rows g and g + 8 of fragment i, 4 halves each
uint m0, n0, a_lane;

uint b_word(uint step, uint idx) { return (base_b >> 3) + ((step * TK + idx / (TN / 8)) * N + n0) / 8 + idx % (TN / 8); }

// B's row p of a step goes where the fragment expects the k that A's permutation put at column p
uint permuted_row(uint p) { return (p & ~15u) | ((p & 2u) << 2) | (((p >> 2) & 3u) << 1) | (p & 1u); }
uint sb_word(uint copy, uint idx) { return copy * TK * BS + permuted_row(idx / (TN / 8)) * BS + idx % (TN / 8); }

void load_b(uint step, uint t) { [[unroll]] for (uint i = 0; i < PB; i++) rb[i] = b[b_word(step, t + 128 * i)]; }
void store_b(uint copy, uint t) { [[unroll]] for (uint i = 0; i < PB; i++) sb[sb_word(copy, t + 128 * i)] = rb[i]; }

#ifndef PACKED_A
#define PACKED_A 0
#endif
void load_a(uint slice, uint r) {
#if PACKED_A  // timing only: each load's 32 lanes read 256 contiguous bytes, as if A were stored fragment by fragment
    [[unroll]] for (uint q = 0; q < 8; q++) ring[r][q] = a[a_lane + (slice * 8 + q) * 32];
#else
    [[unroll]] for (uint i = 0; i < 4; i++)
        [[unroll]] for (uint h = 0; h < 2; h++) ring[r][i * 2 + h] = a[a_lane + (16 * i + 8 * h) * (K / 4) + slice * 4];
#endif
}

FA fragment(uint r, uint i) {
    FA f;
    f16vec2 p;
    p = unpackFloat2x16(ring[r][2 * i].x);     f[0] = p.x; f[1] = p.y;
    p = unpackFloat2x16(ring[r][2 * i].y);     f[2] = p.x; f[3] = p.y;
    p = unpackFloat2x16(ring[r][2 * i + 1].x); f[4] = p.x; f[5] = p.y;
    p = unpackFloat2x16(ring[r][2 * i + 1].y); f[6] = p.x; f[7] = p.y;
    return f;
}

void multiply(uint step, uint copy, uint wn) {
    [[unroll]] for (uint ks = 0; ks < SLICES; ks++) {
        const uint r = ks % RING;
        FA fa[4];
        [[unroll]] for (uint i = 0; i < 4; i++) fa[i] = fragment(r, i);
        load_a(min(step * SLICES + ks + RING, ALL_SLICES - 1), r);  // past the end: a harmless reload
        FB fb[4];
        [[unroll]] for (uint j = 0; j < 4; j++)
            coopMatLoad(fb[j], sb, copy * TK * BS + ks * 16 * BS + (wn + 16 * j) / 8, BS, gl_CooperativeMatrixLayoutRowMajor);
        [[unroll]] for (uint i = 0; i < 4; i++)
            [[unroll]] for (uint j = 0; j < 4; j++)
                acc[i * 4 + j] = coopMatMulAdd(fa[i], fb[j], acc[i * 4 + j]);
    }
}

void main() {
    uint tile = gl_WorkGroupID.x;
    m0 = (tile / (N / TN)) * TM;
    n0 = (tile % (N / TN)) * TN;
    uint t = gl_LocalInvocationID.x;
    uint sg = t / 32, lane = t % 32;
    uint wm = (sg / 2) * 64, wn = (sg % 2) * 64;
#if PACKED_A
    a_lane = (base_a >> 2) + (m0 + wm) / 64 * ALL_SLICES * 8 * 32 + lane;
#else
    a_lane = (base_a >> 2) + (m0 + wm + lane / 4) * (K / 4) + lane % 4;
#endif
    [[unroll]] for (uint q = 0; q < 16; q++) acc[q] = ACC(0.0);
    [[unroll]] for (uint r = 0; r < RING; r++) load_a(r, r);
    load_b(0, t);
    store_b(0, t);
#if BCOPIES == 1
    barrier();
    [[dont_unroll]] for (uint s = 0; s + 1 < STEPS; s++) {
        load_b(s + 1, t);
        multiply(s, 0, wn);
        barrier();
        store_b(0, t);
        barrier();
    }
    multiply(STEPS - 1, 0, wn);
#else
    load_b(1, t);
    barrier();
    [[dont_unroll]] for (uint s = 0; s + 1 < STEPS; s++) {
        multiply(s, s % 2, wn);
        store_b((s + 1) % 2, t);  // read last a step ago, before the barrier all have passed
        load_b(min(s + 2, STEPS - 1), t);
        barrier();
    }
    multiply(STEPS - 1, (STEPS - 1) % 2, wn);
#endif
    [[unroll]] for (uint i = 0; i < 4; i++)
        [[unroll]] for (uint j = 0; j < 4; j++) {
            OUT h = OUT(acc[i * 4 + j]);
            coopMatStore(h, c, base_c + (m0 + wm + 16 * i) * N + n0 + wn + 16 * j, N, gl_CooperativeMatrixLayoutRowMajor);
        }
}
#endif
