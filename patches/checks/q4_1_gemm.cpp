// Q4_1 mul_mat: every column of a batch equals the same column computed alone (n=1 takes
// ggml_vec_dot_q4_1_q8_1), bit for bit, with the GEMM on and off; and timing on vs off
// (patches/llama.cpp-q4_1-gemm.patch). Build against a patched llama.cpp tree built with
// cmake (`cmake --build build --target ggml-cpu`), from that tree:
//   g++ -O2 -march=native -std=c++17 -Iggml/include q4_1_gemm.cpp -o q4_1_gemm \
//     -Wl,--start-group build/ggml/src/libggml.a build/ggml/src/libggml-cpu.a \
//     build/ggml/src/libggml-base.a -Wl,--end-group -fopenmp -lpthread -lm
//   ./q4_1_gemm 2      # threads; exits non-zero when an output differs
#include "ggml.h"
#include "ggml-cpu.h"
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <random>
#include <vector>
#include <algorithm>

static std::vector<float> run(int K, int M, int N, const std::vector<uint8_t> & wq, const float * x, int nth, double * secs, int reps) {
    size_t mem = wq.size() + (size_t)K*N*4 + (size_t)M*N*4 + 64*1024*1024;
    ggml_init_params ip = { mem, nullptr, false };
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * w = ggml_new_tensor_2d(ctx, GGML_TYPE_Q4_1, K, M);
    memcpy(w->data, wq.data(), wq.size());
    ggml_tensor * a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, N);
    memcpy(a->data, x, (size_t)K*N*4);
    ggml_tensor * y = ggml_mul_mat(ctx, w, a);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, y);
    ggml_graph_compute_with_ctx(ctx, gf, nth);
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) ggml_graph_compute_with_ctx(ctx, gf, nth);
    if (secs) *secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / (reps ? reps : 1);
    std::vector<float> out((size_t)M*N);
    memcpy(out.data(), y->data, out.size()*4);
    ggml_free(ctx);
    return out;
}

int main(int argc, char ** argv) {
    int nth = argc > 1 ? atoi(argv[1]) : 2;
    std::mt19937 rng(42);
    std::normal_distribution<float> nd(0.f, 1.f);
    int shapes[][2] = {{576, 576}, {576, 1536}, {1536, 576}, {576, 192}, {96, 37}};
    int bad = 0;
    for (auto & s : shapes) {
        int K = s[0], M = s[1];
        std::vector<float> wf((size_t)K*M);
        for (auto & v : wf) v = nd(rng) * 0.05f;
        std::vector<uint8_t> wq(ggml_row_size(GGML_TYPE_Q4_1, K) * M);
        ggml_quantize_chunk(GGML_TYPE_Q4_1, wf.data(), wq.data(), 0, M, K, nullptr);
        int Nmax = 515;
        std::vector<float> x((size_t)K*Nmax);
        for (auto & v : x) v = nd(rng);
        // each column alone: the per-row dot product
        ggml_cpu_set_q4_1_gemm(true);
        std::vector<float> alone((size_t)M*Nmax);
        for (int j = 0; j < Nmax; ++j) {
            auto o = run(K, M, 1, wq, x.data() + (size_t)j*K, nth, nullptr, 0);
            memcpy(alone.data() + (size_t)j*M, o.data(), M*4);
        }
        for (int N : {2, 3, 4, 5, 7, 47, 48, 49, 64, 97, 256, 515}) {
            for (int on = 0; on < 2; ++on) {
                ggml_cpu_set_q4_1_gemm(on);
                auto o = run(K, M, N, wq, x.data(), nth, nullptr, 0);
                size_t diff = 0;
                for (size_t t = 0; t < o.size(); ++t) diff += memcmp(&o[t], &alone[t], 4) != 0;
                if (diff) { bad++; printf("K=%d M=%d N=%d gemm=%d: %zu of %zu outputs differ\n", K, M, N, on, diff, o.size()); }
            }
        }
        // timing, interleaved
        for (int N : {2, 8, 512}) {
            double ton = 0, toff = 0, t;
            std::vector<double> on_v, off_v;
            for (int r = 0; r < 5; ++r) { int reps = N < 64 ? 200 : 3;
                ggml_cpu_set_q4_1_gemm(false); run(K, M, N, wq, x.data(), nth, &t, reps); off_v.push_back(t);
                ggml_cpu_set_q4_1_gemm(true);  run(K, M, N, wq, x.data(), nth, &t, reps); on_v.push_back(t);
            }
            std::sort(on_v.begin(), on_v.end()); std::sort(off_v.begin(), off_v.end());
            ton = on_v[2]; toff = off_v[2];
            printf("K=%5d M=%5d N=%d: stock %.3f ms, gemm %.3f ms, %.2fx\n", K, M, N, toff*1e3, ton*1e3, toff/ton);
        }
    }
    printf(bad ? "FAIL: %d cases differ\n" : "bit-identical in every case\n", bad);
    return bad != 0;
}
