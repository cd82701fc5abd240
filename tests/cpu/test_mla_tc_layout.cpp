#define BOOST_TEST_MODULE mla_tc_layout
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "mla_tc_layout.cuh"

// The f16-staging MLA decode kernels' shared-memory geometry (mla_tc::s16 in
// kernels/cuda/src/mla_tc_layout.cuh, used by mla_decode_tc16_kernel<2> and <3>) emulated
// on the host with the kernels' own index functions and the PTX ISA's fragment semantics
// (ldmatrix.x4 with and without .trans, mma.m16n8k16 row.col), every thread of the block
// replayed in the kernel's order of phases and barriers: the register loads' f16 stores
// fill each tile's stage exactly once (zeros past the split), S = Q K^T gathered from the
// four k parts equals a naive product for every softmax thread's keys, P stored by the
// softmax threads and read back as A fragments gives O = P V for every warp's latent dims,
// over one to three tiles (the last partial). Along the way: no two threads touch the same
// byte between two barriers unless both only read it (the three-stage kernel's P V and the
// next tile's S share an interval), and every warp-wide shared-memory access takes the
// fewest wavefronts its width allows (32 banks of 4 bytes; 16-byte accesses and ldmatrix in
// phases of 8 lanes, 8-byte ones of 16, 4-byte ones of 32). Values are small integers
// (exact in f32), held as int16 where the kernel holds f16. backend.cuda's results are
// test_gpu_mla's.
namespace L = tandem::cuda::mla_tc;
namespace S = tandem::cuda::mla_tc::s16;

namespace {

struct u4 {
  uint32_t x, y, z, w;
};

// ---- shared memory with per-interval access records

struct access {
  int tid, addr, bytes;
  bool write;
};

// The shared-memory regions of the kernel with `stages` stages.
struct geometry {
  int stages, off_qfrag, off_sp, off_pf, off_alpha, off_slots, smem_bytes;
  int (*stage_of)(int);  // the kernel's regions<N>::stage_off
  template <int N>
  static geometry of() {
    using R = S::regions<N>;
    return {N, R::off_qfrag, R::off_sp, R::off_pf, R::off_alpha, R::off_slots, R::smem_bytes, &R::stage_off};
  }
  int stage_off(int tt) const { return stage_of(tt); }
};

struct smem_model {
  int size = 0;
  std::vector<uint8_t> mem;
  std::vector<access> log;  // since the last barrier
  std::vector<std::string> problems;
  std::string phase;

  explicit smem_model(int bytes) : size(bytes), mem(static_cast<size_t>(bytes), 0xff) {}
  void touch(int tid, int addr, int bytes, bool write) {
    if (addr < 0 || addr + bytes > size || addr % bytes != 0) {
      problems.push_back(phase + ": access at " + std::to_string(addr) + " of " + std::to_string(bytes) +
                         " bytes out of range or misaligned");
      return;
    }
    log.push_back({tid, addr, bytes, write});
  }
  void st(int tid, int addr, const void* src, int bytes) {
    touch(tid, addr, bytes, true);
    if (addr >= 0 && addr + bytes <= size) std::memcpy(&mem[addr], src, bytes);
  }
  void ld(int tid, int addr, void* dst, int bytes) {
    touch(tid, addr, bytes, false);
    if (addr >= 0 && addr + bytes <= size) std::memcpy(dst, &mem[addr], bytes);
  }
  // A barrier: a byte written by one thread may not be read or written by another since
  // the previous barrier.
  void barrier(const std::string& next) {
    std::vector<int> writer(static_cast<size_t>(size), -1);  // -1 none, -2 several
    for (const access& a : log)
      if (a.write)
        for (int b = a.addr; b < a.addr + a.bytes; ++b) writer[b] = writer[b] == -1 || writer[b] == a.tid ? a.tid : -2;
    int races = 0;
    for (const access& a : log)
      for (int b = a.addr; b < a.addr + a.bytes; ++b)
        if (writer[b] == -2 || (writer[b] >= 0 && writer[b] != a.tid)) {
          if (races++ < 4) problems.push_back(phase + ": byte " + std::to_string(b) + " raced");
          break;
        }
    log.clear();
    phase = next;
  }
};

// Wavefronts of one warp-wide access: (lane, byte address) of the active lanes, `width`
// bytes each, in phases of 128 / width lanes; within a phase, a bank serves one 4-byte word
// per wavefront (lanes reading the same word share it).
int wavefronts(const std::vector<std::pair<int, int>>& lanes, int width) {
  const int per_phase = 128 / width;
  int total = 0;
  for (int p = 0; p < 32 / per_phase; ++p) {
    std::set<int> words[32];
    bool any = false;
    for (auto [lane, addr] : lanes) {
      if (lane / per_phase != p) continue;
      any = true;
      for (int w = 0; w < width / 4; ++w) words[(addr / 4 + w) % 32].insert(addr / 4 + w);
    }
    if (!any) continue;
    size_t worst = 0;
    for (const auto& s : words) worst = std::max(worst, s.size());
    total += static_cast<int>(worst);
  }
  return total;
}

struct bank_check {
  std::vector<std::string> problems;
  void check(const std::string& what, const std::vector<std::pair<int, int>>& lanes, int width) {
    const int got = wavefronts(lanes, width);
    const int best = (static_cast<int>(lanes.size()) * width + 127) / 128;
    if (got > best)
      problems.push_back(what + ": " + std::to_string(got) + " wavefronts, " + std::to_string(best) + " possible");
  }
};

uint32_t pack(int16_t lo, int16_t hi) {
  return static_cast<uint32_t>(static_cast<uint16_t>(lo)) | static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16;
}
int16_t lo16(uint32_t r) { return static_cast<int16_t>(r & 0xffff); }
int16_t hi16(uint32_t r) { return static_cast<int16_t>(r >> 16); }

// ldmatrix.x4: lanes 8 i .. 8 i + 7 give the row addresses of matrix i (8 b16 each); lane
// t receives r_i = (M_i[t / 4][2 (t % 4)], M_i[t / 4][2 (t % 4) + 1]), or with .trans
// (M_i[2 (t % 4)][t / 4], M_i[2 (t % 4) + 1][t / 4]).
void ldmatrix_x4(smem_model& sm, bank_check& bc, const std::string& what, int warp, const int (&addr)[32], bool trans,
                 uint32_t (&r)[32][4]) {
  int16_t m[4][8][8];
  std::vector<std::pair<int, int>> lanes;
  for (int l = 0; l < 32; ++l) {
    sm.ld(32 * warp + l, addr[l], m[l >> 3][l & 7], 16);
    lanes.push_back({l, addr[l]});
  }
  bc.check(what, lanes, 16);
  for (int t = 0; t < 32; ++t)
    for (int i = 0; i < 4; ++i)
      r[t][i] = trans ? pack(m[i][2 * (t % 4)][t / 4], m[i][2 * (t % 4) + 1][t / 4])
                      : pack(m[i][t / 4][2 * (t % 4)], m[i][t / 4][2 * (t % 4) + 1]);
}

// mma.m16n8k16.row.col: a0 (g, 2t..), a1 (g + 8, 2t..), a2 (g, 2t + 8..), a3 (g + 8, 2t + 8..);
// b0 (k 2t.., n g), b1 (k 2t + 8.., n g); c0, c1 (g, 2t, 2t + 1), c2, c3 (g + 8, ..).
void mma(float (&c)[32][4], const u4 (&a)[32], const uint32_t (&b0)[32], const uint32_t (&b1)[32]) {
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t = l & 3;
    const uint32_t ar[4] = {a[l].x, a[l].y, a[l].z, a[l].w};
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i & 1), col = 2 * t + 8 * (i >> 1);
      A[row][col] = lo16(ar[i]), A[row][col + 1] = hi16(ar[i]);
    }
    B[2 * t][g] = lo16(b0[l]), B[2 * t + 1][g] = hi16(b0[l]);
    B[2 * t + 8][g] = lo16(b1[l]), B[2 * t + 9][g] = hi16(b1[l]);
  }
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
      float s = 0.0f;
      for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
      c[l][i] += s;
    }
  }
}

// One block's data over up to three tiles, the kernel's order of phases and barriers.
struct block_emulation {
  geometry geo;
  int nk = 0;                              // the split's keys (1 .. 96)
  std::vector<int> slots;                  // [nk] rows of the cache
  std::vector<std::vector<int16_t>> cache;  // [rows][576]
  int16_t q[L::heads][L::dim];
  int16_t p[3][L::heads][L::keys];         // per tile: the probabilities the softmax "computes"
  smem_model sm;
  bank_check bc;
  std::vector<std::string> problems;
  uint32_t ld[L::threads][S::loads][4];  // the threads' load registers
  float o[L::threads][4][8][4] = {};

  block_emulation(const geometry& g, int keys, std::mt19937& rng) : geo(g), nk(keys), sm(g.smem_bytes) {
    std::uniform_int_distribution<int> small(-3, 3), prob(0, 2);
    const int rows = 4 * L::keys;
    cache.assign(rows, std::vector<int16_t>(L::dim));
    for (auto& row : cache)
      for (auto& x : row) x = static_cast<int16_t>(small(rng));
    std::vector<int> perm(rows);
    for (int i = 0; i < rows; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    slots.assign(perm.begin(), perm.begin() + nk);
    for (auto& row : q)
      for (auto& x : row) x = static_cast<int16_t>(small(rng));
    for (int t = 0; t < 3; ++t)
      for (int h = 0; h < L::heads; ++h)
        for (int k = 0; k < L::keys; ++k) p[t][h][k] = static_cast<int16_t>(t * L::keys + k < nk ? prob(rng) : 0);
    // The slot table, written before the first barrier.
    for (int j = 0; j < nk; ++j) {
      const int32_t v = slots[j];
      sm.st(j % L::threads, geo.off_slots + 4 * j, &v, 4);
    }
  }

  // The L2 prefetch of tile tt reads the slots of its rows (lanes 0 .. 3 of each warp).
  void prefetch_tile(int tt) {
    for (int w = 0; w < L::warps; ++w)
      for (int l = 0; l < 4; ++l) {
        const int j = tt * L::keys + S::prefetch_row(w, l);
        if (j < nk) {
          int32_t v = -1;
          sm.ld(32 * w + l, geo.off_slots + 4 * j, &v, 4);
          if (v != slots[j]) problems.push_back("slot table");
        }
      }
  }
  // load_tile: loads [first, last) of tile tt into registers (zeros past the split); the
  // slots of the thread's two rows from the table.
  void load_tile(int tt, int first, int last) {
    for (int tid = 0; tid < L::threads; ++tid) {
      for (int h = 0; h < 2; ++h) {
        const int j = tt * L::keys + S::load_row(tid, h);
        if (j < nk) {
          int32_t v = -1;
          sm.ld(tid, geo.off_slots + 4 * j, &v, 4);
          if (v != slots[j]) problems.push_back("slot table");
        }
      }
      for (int i = first; i < last; ++i) {
        const int j = tt * L::keys + S::load_row(tid, i);
        for (int e = 0; e < 4; ++e) {
          const int16_t v = j < nk ? cache[slots[j]][S::load_col(tid, i) + e] : 0;
          ld[tid][i][e] = static_cast<uint32_t>(static_cast<uint16_t>(v));
        }
      }
    }
    // Global side: a warp's load i reads, per half-warp, 256 contiguous bytes of one row.
    for (int w = 0; w < L::warps; ++w)
      for (int i = first; i < last; ++i)
        for (int h = 0; h < 2; ++h) {
          const int t0 = 32 * w + 16 * h;
          for (int l = 0; l < 16; ++l)
            if (S::load_row(t0 + l, i) != S::load_row(t0, i) || S::load_col(t0 + l, i) != S::load_col(t0, i) + 4 * l ||
                S::load_col(t0, i) % 64 != 0)
              problems.push_back("load " + std::to_string(i) + ": half-warp not one 256-byte run");
        }
  }
  // store_tile: rounds (here: keeps) and stores loads [first, last) of tile tt.
  void store_tile(int tt, int first, int last) {
    const int stage = geo.stage_off(tt);
    for (int i = first; i < last; ++i)
      for (int w = 0; w < L::warps; ++w) {
        std::vector<std::pair<int, int>> lanes;
        for (int l = 0; l < 32; ++l) {
          const int tid = 32 * w + l;
          const int addr = stage + S::load_dst_base(tid) + S::load_dst_step(i);
          if (addr - stage != S::half4_off(S::load_row(tid, i), S::load_col(tid, i)))
            problems.push_back("load_dst_base + load_dst_step != half4_off");
          int16_t v[4];
          for (int e = 0; e < 4; ++e) v[e] = static_cast<int16_t>(ld[tid][i][e]);
          sm.st(tid, addr, v, 8);
          lanes.push_back({l, addr});
        }
        bc.check("tile store " + std::to_string(i), lanes, 8);
      }
  }

  void q_fragments() {
    constexpr int units = 4 * L::ksteps * 32, per = units / L::threads;
    for (int i = 0; i < per; ++i)
      for (int w = 0; w < L::warps; ++w) {
        std::vector<std::pair<int, int>> lanes;
        for (int l = 0; l < 32; ++l) {
          const int tid = 32 * w + l, u = tid + L::threads * i;
          const int ln = u & 31, mks = u >> 5, mt = mks / L::ksteps, ks = mks % L::ksteps;
          const int row0 = 16 * mt + (ln >> 2), col = 16 * ks + 2 * (ln & 3);
          int16_t x[8];
          for (int e = 0; e < 4; ++e) {
            const int h = row0 + 8 * (e & 1), c = col + 8 * (e >> 1);
            x[2 * e] = q[h][c], x[2 * e + 1] = q[h][c + 1];
          }
          sm.st(tid, geo.off_qfrag + 16 * u, x, 16);
          lanes.push_back({l, geo.off_qfrag + 16 * u});
        }
        bc.check("q fragments", lanes, 16);
      }
  }

  // S over tile it's stage into the partial scores.
  void s_phase(int it) {
    const int st = geo.stage_off(it);
    for (int warp = 0; warp < L::warps; ++warp) {
      const int mh = warp & 1, part = warp >> 1;
      float sc[2][4][32][4] = {};
      for (int kk = 0; kk < L::ks_per_part; ++kk) {
        const int ks = L::ks_per_part * part + kk;
        u4 qa[2][32];
        for (int ml = 0; ml < 2; ++ml) {
          std::vector<std::pair<int, int>> lanes;
          for (int l = 0; l < 32; ++l) {
            const int addr = geo.off_qfrag + L::qfrag_off(2 * mh + ml, ks, l);
            sm.ld(32 * warp + l, addr, &qa[ml][l], 16);
            lanes.push_back({l, addr});
          }
          bc.check("q fragment load", lanes, 16);
        }
        for (int np = 0; np < 2; ++np) {
          int addr[32];
          for (int l = 0; l < 32; ++l) addr[l] = st + S::qk_ldsm_off(l, np, ks);
          uint32_t b[32][4];
          ldmatrix_x4(sm, bc, "ldmatrix K", warp, addr, false, b);
          uint32_t b0[32], b1[32], b2[32], b3[32];
          for (int l = 0; l < 32; ++l) b0[l] = b[l][0], b1[l] = b[l][1], b2[l] = b[l][2], b3[l] = b[l][3];
          mma(sc[0][2 * np], qa[0], b0, b1);
          mma(sc[0][2 * np + 1], qa[0], b2, b3);
          mma(sc[1][2 * np], qa[1], b0, b1);
          mma(sc[1][2 * np + 1], qa[1], b2, b3);
        }
      }
      for (int ml = 0; ml < 2; ++ml)
        for (int hr = 0; hr < 2; ++hr)
          for (int qq = 0; qq < 2; ++qq) {
            std::vector<std::pair<int, int>> lanes;
            for (int l = 0; l < 32; ++l) {
              const float v[4] = {sc[ml][2 * qq][l][2 * hr], sc[ml][2 * qq][l][2 * hr + 1],
                                  sc[ml][2 * qq + 1][l][2 * hr], sc[ml][2 * qq + 1][l][2 * hr + 1]};
              const int addr = geo.off_sp + S::sp_off(L::sp_hole(part, mh, 2 * ml + hr, qq, l));
              sm.st(32 * warp + l, addr, v, 16);
              lanes.push_back({l, addr});
            }
            bc.check("partial score store", lanes, 16);
          }
    }
  }

  // The softmax threads gather their rows' scores (checked against Q K^T) and store P (the
  // given p) as the kernel stores its probabilities, and the rows' corrections (t == 0).
  void softmax_phase(int it) {
    for (int warp = 0; warp < L::warps; ++warp) {
      const int mh = warp & 1, part = warp >> 1;
      const int mt_s = 2 * mh + (part >> 1), hi_s = part & 1;
      float v[32][8];
      for (int qq = 0; qq < 2; ++qq)
        for (int kq = 0; kq < L::kparts; ++kq) {
          std::vector<std::pair<int, int>> lanes;
          for (int l = 0; l < 32; ++l) {
            float y[4];
            const int addr = geo.off_sp + S::sp_off(L::sp_hole(kq, mh, part, qq, l));
            sm.ld(32 * warp + l, addr, y, 16);
            lanes.push_back({l, addr});
            for (int e = 0; e < 4; ++e) v[l][4 * qq + e] = (kq == 0 ? 0.0f : v[l][4 * qq + e]) + y[e];
          }
          bc.check("partial score load", lanes, 16);
        }
      for (int l = 0; l < 32; ++l) {
        const int g = l >> 2, t = l & 3, row_s = 16 * mt_s + 8 * hi_s + g;
        for (int e = 0; e < 8; ++e) {
          const int key = 8 * (e >> 1) + 2 * t + (e & 1), j = it * L::keys + key;
          float want = 0.0f;
          for (int d = 0; d < L::dim; ++d) want += static_cast<float>(q[row_s][d]) * (j < nk ? cache[slots[j]][d] : 0);
          if (v[l][e] != want)
            problems.push_back("tile " + std::to_string(it) + ": S[" + std::to_string(row_s) + "][" +
                               std::to_string(key) + "] = " + std::to_string(v[l][e]) + ", want " +
                               std::to_string(want));
        }
      }
      for (int kp = 0; kp < 2; ++kp) {
        std::vector<std::pair<int, int>> lanes;
        for (int l = 0; l < 32; ++l) {
          const int g = l >> 2, t = l & 3, row_s = 16 * mt_s + 8 * hi_s + g;
          // n tiles 2 kp, 2 kp + 1: keys 16 kp + 2 t .. and 16 kp + 8 + 2 t ..
          const int k0 = 16 * kp + 2 * t, k1 = k0 + 8;
          const uint32_t w[2] = {pack(p[it][row_s][k0], p[it][row_s][k0 + 1]),
                                 pack(p[it][row_s][k1], p[it][row_s][k1 + 1])};
          const int addr = geo.off_pf + S::pf_off(mt_s, kp, l) + S::pf_half(hi_s, l);
          sm.st(32 * warp + l, addr, w, 8);
          lanes.push_back({l, addr});
        }
        bc.check("P store", lanes, 8);
      }
      for (int l = 0; l < 32; l += 4) {
        const float one = 1.0f;
        sm.st(32 * warp + l, geo.off_alpha + 4 * (16 * mt_s + 8 * hi_s + (l >> 2)), &one, 4);
      }
    }
  }

  // O += P V over latent dims 64 warp .. from tile it's stage (the corrections read, all 1).
  void pv_phase(int it) {
    const int st = geo.stage_off(it);
    for (int warp = 0; warp < L::warps; ++warp) {
      for (int mt = 0; mt < 4; ++mt)
        for (int hr = 0; hr < 2; ++hr)
          for (int l = 0; l < 32; ++l) {
            float al = 0.0f;
            sm.ld(32 * warp + l, geo.off_alpha + 4 * (16 * mt + 8 * hr + (l >> 2)), &al, 4);
            if (al != 1.0f) problems.push_back("corrections");
          }
      for (int kp = 0; kp < 2; ++kp) {
        u4 pa[4][32];
        for (int mt = 0; mt < 4; ++mt) {
          std::vector<std::pair<int, int>> lanes;
          for (int l = 0; l < 32; ++l) {
            u4 w;
            const int addr = geo.off_pf + S::pf_off(mt, kp, l);
            sm.ld(32 * warp + l, addr, &w, 16);
            lanes.push_back({l, addr});
            pa[mt][l] = S::pf_regs(w, l);
          }
          bc.check("P load", lanes, 16);
        }
        for (int dp = 0; dp < 4; ++dp) {
          int addr[32];
          for (int l = 0; l < 32; ++l) addr[l] = st + S::pv_ldsm_off(l, kp, warp, dp);
          uint32_t b[32][4];
          ldmatrix_x4(sm, bc, "ldmatrix V", warp, addr, true, b);
          uint32_t b0[32], b1[32], b2[32], b3[32];
          for (int l = 0; l < 32; ++l) b0[l] = b[l][0], b1[l] = b[l][1], b2[l] = b[l][2], b3[l] = b[l][3];
          for (int mt = 0; mt < 4; ++mt) {
            float c0[32][4], c1[32][4];
            for (int l = 0; l < 32; ++l)
              for (int i = 0; i < 4; ++i) {
                c0[l][i] = o[32 * warp + l][mt][2 * dp][i];
                c1[l][i] = o[32 * warp + l][mt][2 * dp + 1][i];
              }
            mma(c0, pa[mt], b0, b1);
            mma(c1, pa[mt], b2, b3);
            for (int l = 0; l < 32; ++l)
              for (int i = 0; i < 4; ++i) {
                o[32 * warp + l][mt][2 * dp][i] = c0[l][i];
                o[32 * warp + l][mt][2 * dp + 1][i] = c1[l][i];
              }
          }
        }
      }
    }
  }

  // The kernels' main loops (mla_decode_tc16_kernel), barrier for barrier.
  void run() {
    const int n_tiles = (nk + L::keys - 1) / L::keys;
    sm.barrier("prologue");  // after the slot table
    const int ls = S::loads_s, le = S::loads;
    prefetch_tile(1);
    if (geo.stages == 3) prefetch_tile(2);
    load_tile(0, 0, le);
    q_fragments();
    store_tile(0, 0, le);
    if (geo.stages == 3) {
      const int mid = le - ls;
      load_tile(1, 0, mid);
      store_tile(1, 0, mid);
      load_tile(1, mid, le);
      sm.barrier("tile 0 S .. B");
      for (int it = 0; it < n_tiles; ++it) {
        s_phase(it);
        store_tile(it + 1, mid, le);
        sm.barrier("tile " + std::to_string(it) + " B .. C");
        prefetch_tile(it + 3);
        load_tile(it + 2, 0, mid);
        softmax_phase(it);
        sm.barrier("tile " + std::to_string(it) + " C .. tile " + std::to_string(it + 1) + " B");
        pv_phase(it);
        store_tile(it + 2, 0, mid);
        load_tile(it + 2, mid, le);
      }
    } else {
      for (int it = 0; it < n_tiles; ++it) {
        sm.barrier("tile " + std::to_string(it) + " A .. B");
        prefetch_tile(it + 2);
        load_tile(it + 1, 0, ls);
        s_phase(it);
        store_tile(it + 1, 0, ls);
        load_tile(it + 1, ls, le);
        sm.barrier("tile " + std::to_string(it) + " B .. C");
        softmax_phase(it);
        sm.barrier("tile " + std::to_string(it) + " C .. A");
        pv_phase(it);
        store_tile(it + 1, ls, le);
      }
    }
    sm.barrier("epilogue");
    // O against sum over tiles of P V: thread (warp, g, t) holds heads 16 mt + g (+ 8) and
    // latent dims 64 warp + 8 n + 2 t (+ 1).
    int bad = 0;
    for (int tid = 0; tid < L::threads; ++tid) {
      const int warp = tid >> 5, g = (tid & 31) >> 2, t = tid & 3;
      for (int mt = 0; mt < 4; ++mt)
        for (int n = 0; n < 8; ++n)
          for (int i = 0; i < 4; ++i) {
            const int h = 16 * mt + g + 8 * (i >> 1), d = 64 * warp + 8 * n + 2 * t + (i & 1);
            float want = 0.0f;
            for (int tt = 0; tt < n_tiles; ++tt)
              for (int k = 0; k < L::keys; ++k) {
                const int j = tt * L::keys + k;
                want += static_cast<float>(p[tt][h][k]) * (j < nk ? cache[slots[j]][d] : 0);
              }
            if (o[tid][mt][n][i] != want && bad++ < 4)
              problems.push_back("O[" + std::to_string(h) + "][" + std::to_string(d) + "] = " +
                                 std::to_string(o[tid][mt][n][i]) + ", want " + std::to_string(want));
          }
    }
  }
};

void report(const std::vector<std::string>& problems, const std::string& what) {
  for (size_t i = 0; i < std::min<size_t>(problems.size(), 8); ++i) BOOST_ERROR(what << ": " << problems[i]);
  BOOST_TEST(problems.empty(), what << ": " << problems.size() << " problems");
}

}  // namespace

BOOST_AUTO_TEST_CASE(regions_fit_and_do_not_overlap) {
  struct region {
    const char* name;
    int lo, hi;
  };
  for (const geometry& g : {geometry::of<2>(), geometry::of<3>()}) {
    std::vector<region> rs;
    for (int st = 0; st < g.stages; ++st) rs.push_back({"stage", g.stage_off(st), g.stage_off(st) + S::stage_bytes});
    rs.push_back({"q fragments", g.off_qfrag, g.off_qfrag + L::qfrag_bytes});
    rs.push_back({"partial scores", g.off_sp, g.off_sp + 16 * S::sp_units});
    rs.push_back({"P", g.off_pf, g.off_pf + 16 * S::pf_units});
    rs.push_back({"alpha", g.off_alpha, g.off_alpha + 4 * L::heads});
    rs.push_back({"slots", g.off_slots, g.off_slots + 4 * L::max_chunk});
    for (size_t i = 0; i < rs.size(); ++i) {
      BOOST_TEST(rs[i].lo % 16 == 0, rs[i].name);
      BOOST_TEST(rs[i].hi <= g.smem_bytes, rs[i].name);
      for (size_t j = 0; j < i; ++j)
        BOOST_TEST((rs[i].hi <= rs[j].lo || rs[j].hi <= rs[i].lo), rs[i].name << " / " << rs[j].name);
    }
    BOOST_TEST(g.smem_bytes <= 232448);  // an H100 / H200 block
  }
  BOOST_TEST(geometry::of<2>().smem_bytes == 194816);
  BOOST_TEST(geometry::of<3>().smem_bytes == 231680);
  // Every unit index the kernel forms stays inside its region.
  int max_sp = 0, max_pf = 0;
  for (int kq = 0; kq < L::kparts; ++kq)
    for (int mh = 0; mh < 2; ++mh)
      for (int rg = 0; rg < 4; ++rg)
        for (int q = 0; q < 2; ++q)
          for (int l = 0; l < 32; ++l) max_sp = std::max(max_sp, L::sp_hole(kq, mh, rg, q, l));
  for (int mt = 0; mt < 4; ++mt)
    for (int kp = 0; kp < 2; ++kp)
      for (int l = 0; l < 32; ++l) max_pf = std::max(max_pf, S::pf_off(mt, kp, l) + 16);
  BOOST_TEST(max_sp < S::sp_units);
  BOOST_TEST(max_pf == 16 * S::pf_units);
}

BOOST_AUTO_TEST_CASE(tile_loads_cover_each_row_once) {
  // Every (row, 4 dims) of a tile is loaded by exactly one (thread, load), and its f16 bytes
  // are a permutation of the stage: each byte of the tile written once.
  std::vector<int> dims(L::keys * L::dim / 4, 0), bytes(S::stage_bytes, 0);
  for (int tid = 0; tid < L::threads; ++tid)
    for (int i = 0; i < S::loads; ++i) {
      const int r = S::load_row(tid, i), c = S::load_col(tid, i);
      BOOST_REQUIRE((r >= 0 && r < L::keys && c >= 0 && c + 4 <= L::dim && c % 4 == 0));
      ++dims[(r * L::dim + c) / 4];
      for (int b = 0; b < 8; ++b) ++bytes[S::half4_off(r, c) + b];
    }
  BOOST_TEST(std::all_of(dims.begin(), dims.end(), [](int n) { return n == 1; }));
  // The kernel's form of the same addresses: two row pointers (load_row(tid, 0) and
  // load_row(tid, 1), at column load_col(tid, 0)), load i at +64 (i >> 1) floats of row i & 1.
  for (int tid = 0; tid < L::threads; ++tid)
    for (int i = 0; i < S::loads; ++i) {
      BOOST_TEST(S::load_row(tid, i) == S::load_row(tid, i & 1));
      BOOST_TEST(S::load_col(tid, i) == S::load_col(tid, 0) + 64 * (i >> 1));
    }
  BOOST_TEST(std::all_of(bytes.begin(), bytes.end(), [](int n) { return n == 1; }));
  // f16_off's chunks: each (row, chunk) a distinct 16 bytes inside the row.
  for (int r = 0; r < L::keys; ++r) {
    std::set<int> seen;
    for (int k = 0; k < L::dim / 8; ++k) {
      const int off = S::f16_off(r, k);
      BOOST_TEST((off >= r * S::row_bytes && off + 16 <= (r + 1) * S::row_bytes));
      seen.insert(off);
    }
    BOOST_TEST(seen.size() == static_cast<size_t>(L::dim / 8));
  }
}

BOOST_AUTO_TEST_CASE(tiles_emulated) {
  std::mt19937 rng(7);
  for (const geometry& g : {geometry::of<2>(), geometry::of<3>()})
    for (int nk : {96, 77, 64, 45, 33, 32, 1}) {  // 3 full tiles, partial last tiles, one key
      auto e = std::make_unique<block_emulation>(g, nk, rng);
      e->run();
      const std::string what = std::to_string(g.stages) + " stages, nk " + std::to_string(nk);
      report(e->problems, what + " (values)");
      report(e->sm.problems, what + " (races)");
      report(e->bc.problems, what + " (bank conflicts)");
    }
}

BOOST_AUTO_TEST_CASE(the_model_sees_conflicts) {
  // The bank model itself: 32 lanes of 16 bytes at a 1152-byte row stride without the
  // swizzle conflict 8-way; with it (f16_off), none.
  std::vector<std::pair<int, int>> plain, swz;
  for (int l = 0; l < 32; ++l) {
    plain.push_back({l, (l & 7) * S::row_bytes + 16 * (l >> 3)});
    swz.push_back({l, S::f16_off(l & 7, l >> 3)});
  }
  BOOST_TEST(wavefronts(plain, 16) == 32);
  BOOST_TEST(wavefronts(swz, 16) == 4);
  // 4-byte stores 16 bytes apart (the old kernel's P stores): 4-way.
  std::vector<std::pair<int, int>> p4;
  for (int l = 0; l < 32; ++l) p4.push_back({l, 16 * l});
  BOOST_TEST(wavefronts(p4, 4) == 4);
}
