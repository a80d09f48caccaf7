// A hand-written f16 GEMM (C = A x B, square SIZE, row-major, f32 accumulators) for warp_specialized.py: the
// interface of retarget's matmul kernel (bindings 0, 1, 2; push constants: the element bases), so that it can
// stand in for it. 128x128 output tiles, 4 consumer subgroups of 64x64 (4x4 16x16x16 cooperative matrices).
//
//   PRODUCERS 0: every subgroup stages (loads the next step into registers before the multiplies, stores after a
//                barrier): the shipped schedule, as a baseline for the hand-written code.
//   PRODUCERS 1 or 2: one or two more subgroups stage, into COPIES copies of TK-deep steps; the four others only
//                multiply. One barrier a step. With STAGE_IN_ACC a producer holds its loads in the accumulators'
//                elements (each thread's 128 floats, used as words), so that the two roles share one set of
//                registers. SAME_STEP: a producer loads and stores a step within one barrier interval (nothing
//                in flight across a barrier). NO_STAGING (timing only): the producers do nothing, the
//                multiplies read stale tiles.
#version 460
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require

#ifndef PRODUCERS
#define PRODUCERS 0
#endif
#ifndef SAME_STEP
#define SAME_STEP 0
#endif
#ifndef NO_STAGING
#define NO_STAGING 0
#endif
#ifndef STAGE_IN_ACC
#define STAGE_IN_ACC 1
#endif
#ifndef KS_UNROLL
#define KS_UNROLL 0
#endif

const uint THREADS = 128 + 32 * PRODUCERS;
layout(local_size_x = THREADS) in;
layout(set = 0, binding = 0) readonly buffer InA { uvec4 a[]; };
layout(set = 0, binding = 1) readonly buffer InB { uvec4 b[]; };
layout(set = 0, binding = 2) writeonly buffer Out { float16_t c[]; };
layout(push_constant) uniform Bases { uint base_a; uint base_b; uint base_c; };

const uint N = SIZE;
const uint K = SIZE;
const uint TM = 128;
const uint TN = 128;
const uint STEPS = K / TK;
const uint AS = TK / 8 + 1;  // staged rows in uvec4s, padded by 16 bytes so that a fragment's rows miss each other's banks
const uint BS = TN / 8 + 1;
const uint A_WORDS = TM * TK / 8;  // uvec4s a step
const uint B_WORDS = TK * TN / 8;
shared uvec4 sa[COPIES * TM * AS];
shared uvec4 sb[COPIES * TK * BS];

#define ACC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define FA coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define FB coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define OUT coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

ACC acc[16];
uint m0, n0;

uint a_word(uint step, uint idx) { return (base_a >> 3) + ((m0 + idx / (TK / 8)) * K + step * TK) / 8 + idx % (TK / 8); }
uint b_word(uint step, uint idx) { return (base_b >> 3) + ((step * TK + idx / (TN / 8)) * N + n0) / 8 + idx % (TN / 8); }
uint sa_word(uint copy, uint idx) { return copy * TM * AS + (idx / (TK / 8)) * AS + idx % (TK / 8); }
uint sb_word(uint copy, uint idx) { return copy * TK * BS + (idx / (TN / 8)) * BS + idx % (TN / 8); }

void multiply(uint copy, uint wm, uint wn) {
#if KS_UNROLL
    [[unroll]]
#else
    [[dont_unroll]]
#endif
    for (uint ks = 0; ks < TK / 16; ks++) {
        FA fa[4];
        FB fb[4];
        [[unroll]] for (uint i = 0; i < 4; i++)
            coopMatLoad(fa[i], sa, copy * TM * AS + (wm + 16 * i) * AS + ks * 2, AS, gl_CooperativeMatrixLayoutRowMajor);
        [[unroll]] for (uint j = 0; j < 4; j++)
            coopMatLoad(fb[j], sb, copy * TK * BS + ks * 16 * BS + (wn + 16 * j) / 8, BS, gl_CooperativeMatrixLayoutRowMajor);
        [[unroll]] for (uint i = 0; i < 4; i++)
            [[unroll]] for (uint j = 0; j < 4; j++)
                acc[i * 4 + j] = coopMatMulAdd(fa[i], fb[j], acc[i * 4 + j]);
    }
}

void write_out(uint wm, uint wn) {
    [[unroll]] for (uint i = 0; i < 4; i++)
        [[unroll]] for (uint j = 0; j < 4; j++) {
            OUT h = OUT(acc[i * 4 + j]);
            coopMatStore(h, c, base_c + (m0 + wm + 16 * i) * N + n0 + wn + 16 * j, N, gl_CooperativeMatrixLayoutRowMajor);
        }
}

#if PRODUCERS == 0
// every thread stages A_WORDS / THREADS + B_WORDS / THREADS words a step
const uint PA = A_WORDS / THREADS;
const uint PB = B_WORDS / THREADS;
uvec4 ra[PA];
uvec4 rb[PB];

void load_step(uint step, uint t) {
    [[unroll]] for (uint i = 0; i < PA; i++) ra[i] = a[a_word(step, t + THREADS * i)];
    [[unroll]] for (uint i = 0; i < PB; i++) rb[i] = b[b_word(step, t + THREADS * i)];
}

void store_step(uint copy, uint t) {
    [[unroll]] for (uint i = 0; i < PA; i++) sa[sa_word(copy, t + THREADS * i)] = ra[i];
    [[unroll]] for (uint i = 0; i < PB; i++) sb[sb_word(copy, t + THREADS * i)] = rb[i];
}

void main() {
    uint tile = gl_WorkGroupID.x;
    m0 = (tile / (N / TN)) * TM;
    n0 = (tile % (N / TN)) * TN;
    uint t = gl_LocalInvocationID.x;
    uint sg = t / 32;
    uint wm = (sg / 2) * 64, wn = (sg % 2) * 64;
    [[unroll]] for (uint q = 0; q < 16; q++) acc[q] = ACC(0.0);
    load_step(0, t);
    store_step(0, t);
    barrier();
    [[dont_unroll]] for (uint s = 0; s + 1 < STEPS; s++) {
        load_step(s + 1, t);
        multiply(0, wm, wn);
        barrier();
        store_step(0, t);
        barrier();
    }
    multiply(0, wm, wn);
    write_out(wm, wn);
}

#else
// the producer subgroups stage: P threads move A_WORDS + B_WORDS words a step
const uint P = 32 * PRODUCERS;
const uint PA = A_WORDS / P;
const uint PB = B_WORDS / P;

#if STAGE_IN_ACC
// word w (PA + PB of them, 4 floats each) lives in accumulator w / 2, elements (w % 2) * 4 ..
uvec4 held(uint w) {
    uint q = w / 2, e = (w % 2) * 4;
    return uvec4(floatBitsToUint(acc[q][e]), floatBitsToUint(acc[q][e + 1]), floatBitsToUint(acc[q][e + 2]),
                 floatBitsToUint(acc[q][e + 3]));
}
void hold(uint w, uvec4 v) {
    uint q = w / 2, e = (w % 2) * 4;
    acc[q][e] = uintBitsToFloat(v.x);
    acc[q][e + 1] = uintBitsToFloat(v.y);
    acc[q][e + 2] = uintBitsToFloat(v.z);
    acc[q][e + 3] = uintBitsToFloat(v.w);
}
#else
uvec4 words[PA + PB];
uvec4 held(uint w) { return words[w]; }
void hold(uint w, uvec4 v) { words[w] = v; }
#endif

void load_step(uint step, uint pt) {
#if !NO_STAGING
    [[unroll]] for (uint i = 0; i < PA; i++) hold(i, a[a_word(step, pt + P * i)]);
    [[unroll]] for (uint i = 0; i < PB; i++) hold(PA + i, b[b_word(step, pt + P * i)]);
#endif
}

void store_step(uint copy, uint pt) {
#if !NO_STAGING
    [[unroll]] for (uint i = 0; i < PA; i++) sa[sa_word(copy, pt + P * i)] = held(i);
    [[unroll]] for (uint i = 0; i < PB; i++) sb[sb_word(copy, pt + P * i)] = held(PA + i);
#endif
}

void main() {
    uint tile = gl_WorkGroupID.x;
    m0 = (tile / (N / TN)) * TM;
    n0 = (tile % (N / TN)) * TN;
    uint t = gl_LocalInvocationID.x;
    uint sg = t / 32, pt = t - 128;
    uint wm = (sg / 2) * 64, wn = (sg % 2) * 64;
    bool producer = sg >= 4;
    [[unroll]] for (uint q = 0; q < 16; q++) acc[q] = ACC(0.0);
#if SAME_STEP
    if (producer) {  // the first COPIES - 1 steps staged
        [[unroll]] for (uint s = 0; s + 1 < COPIES; s++) {
            load_step(s, pt);
            store_step(s, pt);
        }
    }
    barrier();
    [[dont_unroll]] for (uint s = 0; s < STEPS; s++) {
        if (!producer) {
            multiply(s % COPIES, wm, wn);
        } else if (s + COPIES - 1 < STEPS) {  // the step read COPIES - 1 steps on, loaded and stored
            load_step(s + COPIES - 1, pt);
            store_step((s + COPIES - 1) % COPIES, pt);
        }
        barrier();
    }
#else
    if (producer) {  // the first COPIES - 1 steps staged, and the one after held
        [[unroll]] for (uint s = 0; s + 1 < COPIES; s++) {
            load_step(s, pt);
            store_step(s, pt);
        }
        load_step(COPIES - 1, pt);
    }
    barrier();
    [[dont_unroll]] for (uint s = 0; s < STEPS; s++) {
        if (!producer) {
            multiply(s % COPIES, wm, wn);
        } else if (s + COPIES - 1 < STEPS) {  // the held step stored into the copy read COPIES - 1 steps on
            store_step((s + COPIES - 1) % COPIES, pt);
            if (s + COPIES < STEPS) load_step(s + COPIES, pt);
        }
        barrier();
    }
#endif
    if (!producer) write_out(wm, wn);
}
#endif
