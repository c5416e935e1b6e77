// CPU harness for cu_src/pad.cu (tests/test_pad.py builds it with g++ when one is available): runs
// the kernels' own device functions over the same tiles, threads and chunks the GPU launch would
// use, one after another, so the index maps, axis merging, alignment paths and partial chunks are
// checked against numpy.pad without a GPU. The barrier / shared-memory plumbing is not exercised.
//
// stdin: the path ("flat", "rows", "periodic": the kernels pad_flat, pad_rows, pad_periodic) itemsize kmode
//        threads xshift xoffset xcount <the forward kernels' args after x, y> then xcount * itemsize raw
//        bytes; stdout: rows * wtot * itemsize raw bytes.
//    or: "gather" fkind A outk n C before fold brows bp0 bth stagger, then A*outk*C doubles;
//    or: "gather2" fkind A outh nh outw nw before_h before_w fold ilo ihi jlo jhi, then A*outh*outw doubles;
//        stdout: A*n*C doubles.
#define PAD_HOST
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pad.cu"

static long long rd() {
  long long v;
  if (scanf("%lld", &v) != 1) { fprintf(stderr, "bad input\n"); exit(2); }
  return v;
}

static std::string g_path;  // the kernel to emulate

template <int MODE, typename T>
static void forward(PadParams& p, int threads, const T* x, T* y) {
  if (g_path == "rows") {  // (last unit first: a unit that wrote past its row's end would show in the next)
    for (long long t = p.tiles - 1; t >= 0; --t)
      for (int lane = 0; lane < p.group; ++lane) pad_rows_unit<MODE, T>(p, x, y, t, lane);
    return;
  }
  if (g_path == "periodic") {
    for (long long t = 0; t < p.tiles; ++t)
      for (int tid = 0; tid < threads; ++tid) {
        const PadPeriodicUnit u = pad_periodic_decode(p, t, 16 / sizeof(T));
        PadPack<T> v;
        pad_periodic_pack<T>(p, x, u, tid, v);
        pad_periodic_store<T>(p, y, u, tid, threads, v);
      }
    return;
  }
  // pad_flat: every chunk of the flat output, some with a fresh row cache, some reusing it
  const long long V = 16 / sizeof(T), nchunks = (p.rows * p.wtot + V - 1) / V;
  long long cur = -1;
  PadRow r = {0, 0, -1, 0};
  for (long long g = 0; g < nchunks; ++g) {
    if (g % 3 == 0) cur = -1;
    pad_flat_chunk<MODE, T>(p, x, y, g, cur, r);
  }
}

template <typename T>
static int run_forward(int kmode, int threads, long long xshift, long long xoffset, long long xcount, PadParams& p) {
  // x's buffer placed `xshift` bytes past a 16-byte boundary, as a device view might be.
  std::vector<unsigned char> xbuf(xcount * sizeof(T) + 32);
  unsigned char* base = xbuf.data() + ((16 - ((unsigned long long)xbuf.data() & 15)) & 15) + xshift;
  if (xcount && fread(base, sizeof(T), xcount, stdin) != (size_t)xcount) return 3;
  const long long total = p.rows * p.wtot;
  std::vector<unsigned char> ybuf(total * sizeof(T) + 32, 0xA5);  // poisoned
  T* y = reinterpret_cast<T*>(ybuf.data() + ((16 - ((unsigned long long)ybuf.data() & 15)) & 15));
  memset(y, 0xA5, total * sizeof(T));
  const T* x = reinterpret_cast<const T*>(base) + xoffset;
  switch (kmode) {
    case 0: forward<0, T>(p, threads, x, y); break;
    case 1: forward<1, T>(p, threads, x, y); break;
    case 2: forward<2, T>(p, threads, x, y); break;
    default: forward<3, T>(p, threads, x, y); break;
  }
  for (size_t i = total * sizeof(T); i < total * sizeof(T) + 16; ++i)  // nothing written past the output
    if (reinterpret_cast<unsigned char*>(y)[i] != 0xA5) return 4;
  fwrite(y, sizeof(T), total, stdout);
  return 0;
}

int main() {
  char what[16];
  if (scanf("%15s", what) != 1) return 2;
  if (std::string(what) == "gather") {
    const int fkind = (int)rd();
    const long long A = rd(), outk = rd(), n = rd(), C = rd(), before = rd();
    const int fold = (int)rd();
    const long long brows = rd(), bp0 = rd(), bth = rd(), stagger = rd();
    getchar();
    std::vector<double> g(A * outk * C);
    if (!g.empty() && fread(g.data(), sizeof(double), g.size(), stdin) != g.size()) return 3;
    std::vector<double> r(A * n * C);
    for (long long idx = 0; idx < (long long)r.size(); ++idx) {
      const long long c = idx % C, ai = idx / C, i = ai % n, a = ai / n;
      r[idx] = fkind == 0 ? pad_gather_one<0, double, double>(g.data(), a, i, c, outk, n, C, before, fold, brows, bp0, bth, stagger)
             : fkind == 1 ? pad_gather_one<1, double, double>(g.data(), a, i, c, outk, n, C, before, fold, brows, bp0, bth, stagger)
                          : pad_gather_one<2, double, double>(g.data(), a, i, c, outk, n, C, before, fold, brows, bp0, bth, stagger);
    }
    fwrite(r.data(), sizeof(double), r.size(), stdout);
    return 0;
  }
  if (std::string(what) == "gather2") {
    const int fkind = (int)rd();
    const long long A = rd(), outh = rd(), nh = rd(), outw = rd(), nw = rd(), bh = rd(), bw = rd();
    const int fold = (int)rd();
    const long long ilo = rd(), ihi = rd(), jlo = rd(), jhi = rd();
    getchar();
    std::vector<double> g(A * outh * outw);
    if (!g.empty() && fread(g.data(), sizeof(double), g.size(), stdin) != g.size()) return 3;
    std::vector<double> r(A * nh * nw);
    // the kernel's two loops, thread by thread, on a grid of 5 threads (each takes several steps of PAD_GATHER_QUADS)
    const PadGather2 S = pad_gather2_sizes(A, nh, nw, jlo, jhi);
    const long long threads = 5;
    for (long long tid = 0; tid < threads; ++tid) {
      for (long long t0 = tid; t0 < S.nrows * S.nq; t0 += threads * PAD_GATHER_QUADS)
        if (fkind == 0)
          pad_gather2_quad_step<0, double, double>(g.data(), r.data(), S, outh, nh, outw, nw, bh, bw, fold, ilo, ihi, t0,
                                                   threads);
        else
          pad_gather2_quad_step<1, double, double>(g.data(), r.data(), S, outh, nh, outw, nw, bh, bw, fold, ilo, ihi, t0,
                                                   threads);
      for (long long t = tid; t < S.nrows * S.nc; t += threads)
        if (fkind == 0)
          pad_gather2_column<0, double, double>(g.data(), r.data(), S, outh, nh, outw, nw, bh, bw, fold, t);
        else
          pad_gather2_column<1, double, double>(g.data(), r.data(), S, outh, nh, outw, nw, bh, bw, fold, t);
    }
    fwrite(r.data(), sizeof(double), r.size(), stdout);
    return 0;
  }
  g_path = what;
  const int itemsize = (int)rd(), kmode = (int)rd(), threads = (int)rd();
  const long long xshift = rd(), xoffset = rd(), xcount = rd();
  PadParams p;
  p.rows = rd(); p.wtot = rd(); p.tiles = rd(); p.tpr = rd();
  p.tile_chunks = (int)rd(); p.group = (int)rd(); p.nd = (int)rd(); p.fold = (int)rd();
  for (int d = 0; d < PAD_MAXD; ++d) { p.out[d] = rd(); p.n[d] = rd(); p.before[d] = rd(); p.stride[d] = rd(); }
  p.lout = rd(); p.ln = rd(); p.lbefore = rd(); p.lstride = rd(); p.blk = rd(); p.stagger = rd();
  p.contig = (int)rd();
  for (int i = 0; i < 2 * PAD_MAXD + 2; ++i) {
    unsigned long long v;
    if (scanf("%llu", &v) != 1) return 2;
    p.cval[i] = v;
  }
  getchar();  // the newline before the raw bytes
  switch (itemsize) {
    case 1: return run_forward<unsigned char>(kmode, threads, xshift, xoffset, xcount, p);
    case 2: return run_forward<unsigned short>(kmode, threads, xshift, xoffset, xcount, p);
    case 4: return run_forward<unsigned int>(kmode, threads, xshift, xoffset, xcount, p);
    default: return run_forward<unsigned long long>(kmode, threads, xshift, xoffset, xcount, p);
  }
}
