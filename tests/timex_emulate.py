"""NumPy emulation of the index arithmetic of cu_src/timex.cu's tiled kernels (CPU, float64).

Each function follows its kernel's staging (shared-memory layout, zero fill), per-thread or per-lane
register tiles, warp skips and stores line by line, with the arithmetic done exactly, so a CPU test can
check the tiling, the Toeplitz tap windows, the time reversal and the mma fragment maps (m16n8k8 TF32;
m16n8k16 on 16-bit operands, with ldmatrix) against the float64 reference without a GPU. It checks the design
of the indexing, not the CUDA code itself (the GPU tests do that); keep the two in step when a kernel changes."""
from __future__ import annotations

import numpy as np

THREADS = 128


def tiled(w, k, eps, RB, RT, WB, REV, KU=32):
    """timex_tiled<E, TiledTile<RB, RT, WB>, Product, Loads> (REV: Product::grad_k; the loads change only how
    the same tile is staged; the kernel's chunk is KU = 32)."""
    B, C, T = k.shape
    WT = 32 // WB
    BM, TN = WB * RB, WT * RT * 4
    KS = BM + (4 if BM % 4 == 0 else 2)
    NTAP = TN + KU
    out = np.full((B, C, T), np.nan)
    for c, t0, b0 in _toeplitz_blocks(B, C, T, BM, TN):
        nch = (min(t0 + TN, T) + KU - 1) // KU
        acc = np.zeros((THREADS, RB, RT))
        for ch in range(nch):
            u0 = ch * KU
            ks = np.full(KU * KS, np.nan)
            for idx in range(KU * BM):
                b, u = b0 + idx // KU, u0 + idx % KU
                ks[(idx % KU) * KS + idx // KU] = k[b, c, T - 1 - u if REV else u] if (b < B and u < T) else 0
            tp = np.array([w[c, T - 1 - d] if 0 <= d < T else 0.0
                           for d in range(t0 - u0 - (KU - 1), t0 - u0 - (KU - 1) + NTAP)])
            for tid in range(THREADS):
                warp, lane = divmod(tid, 32)
                lane_b, lane_t = lane % WB, lane // WB
                lt = (warp * WT + lane_t) * RT
                warp_tmax = t0 + (warp + 1) * WT * RT - 1
                if not (u0 <= warp_tmax and warp_tmax - WT * RT < T - 1):
                    continue
                for p in range(KU // 4):
                    base = lt + KU - 4 - 4 * p
                    assert base % 4 == 0 and base >= 0 and base + RT + 4 <= NTAP
                    win = tp[base: base + RT + 4]
                    for q in range(4):
                        kv = ks[(4 * p + q) * KS + lane_b * RB:][:RB]
                        acc[tid] += np.outer(kv, win[3 - q: 3 - q + RT])
        for tid in range(THREADS):
            warp, lane = divmod(tid, 32)
            lane_b, lane_t = lane % WB, lane // WB
            lt = (warp * WT + lane_t) * RT
            for i in range(RB):
                for j in range(RT):
                    b, t = b0 + lane_b * RB + i, t0 + lt + j
                    if b < B and t < T:
                        out[b, c, T - 1 - t if REV else t] = acc[tid, i, j] + eps
    return out


def _pad(i):
    return i + (i >> 4) * 4


def grad_w(k, g, RD, RU, LD, group=16):
    """timex_grad_w<E, LagTile<RD, RU, LD>, Loads>: blocks in channel groups, lags per thread, rows per warp."""
    B, C, T = k.shape
    LU = 32 // LD
    DN, KU, BB = LD * RD, LU * RU, 8
    GN = KU + DN
    KP, GP = _pad(KU), _pad(GN)
    nd = -(-T // DN)
    gw = np.full((C, T), np.nan)
    for bid in range(C * nd):
        grp = bid // (group * nd)
        gsz = min(group, C - grp * group)
        r_in = bid - grp * group * nd
        c, d0 = grp * group + r_in % gsz, (r_in // gsz) * DN
        n_u = (T - d0 + KU - 1) // KU
        acc = np.zeros((THREADS, RD))
        for ch in range(-(-B // BB) * n_u):
            bc0, u0 = (ch // n_u) * BB, (ch % n_u) * KU
            ksm, gsm = np.full(BB * KP, np.nan), np.full(BB * GP, np.nan)
            for idx in range(BB * KU):
                b, u = bc0 + idx // KU, u0 + idx % KU
                ksm[(idx // KU) * KP + _pad(idx % KU)] = k[b, c, u] if (b < B and u < T) else 0
            for idx in range(BB * GN):
                b, t = bc0 + idx // GN, u0 + d0 + idx % GN
                gsm[(idx // GN) * GP + _pad(idx % GN)] = g[b, c, t] if (b < B and t < T) else 0
            for tid in range(THREADS):
                warp, lane = divmod(tid, 32)
                lane_d, lane_u = lane % LD, lane // LD
                for rr in range(2):
                    r = warp * 2 + rr
                    if bc0 + r >= B:
                        continue
                    kv = np.concatenate([ksm[r * KP + _pad(lane_u * RU + m):][:4] for m in range(0, RU, 4)])
                    gv = np.concatenate([gsm[r * GP + _pad(lane_u * RU + lane_d * RD + m):][:4]
                                         for m in range(0, RU + RD, 4)])
                    for i in range(RU):
                        acc[tid] += kv[i] * gv[i: i + RD]
        red = np.zeros((4, DN))
        for warp in range(4):
            for lane_d in range(LD):
                red[warp, lane_d * RD:][:RD] = sum(acc[warp * 32 + lu * LD + lane_d] for lu in range(LU))
        for x in range(DN):
            if d0 + x < T:
                gw[c, T - 1 - (d0 + x)] = red[:, x].sum()
    return gw


def _mma(acc, a, b):
    """mma.m16n8k8 .row.col f32.tf32: acc[32][4] += A(a[32][4]) @ B(b[32][2]) with PTX's fragment maps."""
    A, Bm, Cm = np.zeros((16, 8)), np.zeros((8, 8)), np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        A[g, t], A[g + 8, t], A[g, t + 4], A[g + 8, t + 4] = a[lane]
        Bm[t, g], Bm[t + 4, g] = b[lane]
        Cm[g, 2 * t], Cm[g, 2 * t + 1], Cm[g + 8, 2 * t], Cm[g + 8, 2 * t + 1] = acc[lane]
    Cm += A @ Bm
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        acc[lane] = [Cm[g, 2 * t], Cm[g, 2 * t + 1], Cm[g + 8, 2 * t], Cm[g + 8, 2 * t + 1]]


def _toeplitz_blocks(B, C, T, BM=32, TN=256):
    """The Toeplitz kernels' grid (C, ceil(T/TN), ceil(B/BM)), the last t tile first: (c, t0, b0) a block."""
    gy, gz = -(-T // TN), -(-B // BM)
    for c in range(C):
        for by in range(gy):
            for bz in range(gz):
                yield c, (gy - 1 - by) * TN, bz * BM


def _toeplitz_grid(k, eps, REV, chunk):
    """Both TF32 Toeplitz kernels' grid: per block, chunk(c, t0, b0, u0, acc) adds each 32-wide u chunk into
    acc[slice][lane][mt][j][x]; then the epilogue stores it."""
    B, C, T = k.shape
    out = np.full((B, C, T), np.nan)
    for c, t0, b0 in _toeplitz_blocks(B, C, T):
        acc = np.zeros((4, 32, 2, 8, 4))
        for ch in range((min(t0 + 256, T) + 31) // 32):
            chunk(c, t0, b0, ch * 32, acc)
        _store(out, acc, _batch_rows(b0, B), t0, c, eps, REV)
    return out


def tf32x3(w, k, eps, REV):
    """timex_tf32x3<Product> (REV: grad_k) with exact products (the hi/lo split is a precision matter, not an
    index one)."""
    B, C, T = k.shape
    BM, TN, KU, KSU = 32, 256, 32, 36
    NTAP = TN + KU

    def chunk(c, t0, b0, u0, acc):
        kh = np.full(BM * KSU, np.nan)
        for idx in range(KU * BM):
            b, u = b0 + idx // KU, u0 + idx % KU
            kh[(idx // KU) * KSU + idx % KU] = k[b, c, T - 1 - u if REV else u] if (b < B and u < T) else 0
        th = np.array([w[c, T - 1 - d] if 0 <= d < T else 0.0
                       for d in range(t0 - u0 - (KU - 1), t0 - u0 - (KU - 1) + NTAP)])
        for warp in range(4):
            warp_tmax = t0 + (warp + 1) * 64 - 1
            if u0 > warp_tmax or warp_tmax - 64 >= T - 1:
                continue
            bfr = np.zeros((32, 11, 2))
            for lane in range(32):
                grp, tig = lane >> 2, lane & 3
                for m in range(11):
                    i = warp * 64 + 8 * (m - 3) + grp - tig + KU - 1
                    bfr[lane, m] = [th[i], th[i - 4]]
            for s in range(KU // 8):
                afr = np.zeros((32, 2, 4))
                for lane in range(32):
                    grp, tig = lane >> 2, lane & 3
                    for mt in range(2):
                        r = (16 * mt + grp) * KSU + 8 * s + tig
                        afr[lane, mt] = [kh[r], kh[r + 8 * KSU], kh[r + 4], kh[r + 8 * KSU + 4]]
                for mt in range(2):
                    for j in range(8):
                        _mma(acc[warp, :, mt, j], afr[:, mt], bfr[:, j - s + 3])

    return _toeplitz_grid(k, eps, REV, chunk)


def _folded_grid(k, eps, REV, chunk):
    """timex_tf32x3f's folded grid (FoldedRows): block z takes rows 32z.. of the (256-time block p, b) pairs,
    p-major, the last rows first, at the virtual times of its latest block pmax; row r is 256 (pmax - p) behind."""
    B, C, T = k.shape
    nblk = -(-T // 256)
    rows = B * nblk
    out = np.full((B, C, T), np.nan)
    for c in range(C):
        for z in range(-(-rows // 32)):
            rb = (-(-rows // 32) - 1 - z) * 32
            pmax = min(nblk - 1, (rb + 31) // B)
            at = lambda lr: (None if rb + lr >= rows else
                             ((rb + lr) % B, 256 * (pmax - (rb + lr) // B)))
            mt0_from = 256 * (pmax - min(nblk - 1, (rb + 15) // B))  # m-tile 0 skipped before this u
            acc = np.zeros((4, 32, 2, 8, 4))
            for ch in range(pmax * 8 + 8):
                chunk(c, pmax * 256, at, ch * 32, acc, mt0_from)
            _store(out, acc, at, pmax * 256, c, eps, REV)
    return out


def tf32x3f(w, k, eps, REV, TRI=False, FOLD=False):
    """timex_tf32x3f<Product, Diagonal, float, FOLD>: fragment-order k tile and tap-pair window, warp w on slice w,
    two buffers, and with TRI (Diagonal::skip_zero_tiles) the diagonal chunks' skipped tiles (exact products);
    FOLD: the folded rows (the flushed sums are a precision matter, not an index one)."""
    B, C, T = k.shape
    BM, TN, KU = 32, 256, 32
    NTAP = TN + KU
    tap = lambda c, d: w[c, T - 1 - d] if 0 <= d < T else 0.0

    def chunk(c, t0, rows, u0, acc, mt0_from=0):
        a = np.full(KU * BM, np.nan)  # staged words as the kernel's threads write them
        for x in range(128):
            sl, se = x >> 2, x & 3
            lr, uq = (sl >> 2) + 8 * (se & 1), (sl & 3) + 4 * (se >> 1)
            for q in range(KU * BM // 128):
                at = rows(lr + 16 * (q & 1))
                u = u0 + 8 * (q >> 1) + uq - (at[1] if at else 0)
                a[x + q * 128] = k[at[0], c, T - 1 - u if REV else u] if (at and 0 <= u < T) else 0.0
        tp = np.full((NTAP, 2), np.nan)
        for i in range(NTAP):
            d = t0 - u0 - (KU - 1) + i
            tp[i] = [tap(c, d), tap(c, d - 4)]
        for warp in range(4):
            role = warp
            ts = t0 + role * 64
            if u0 > ts + 63 or (ts >= T and not FOLD):
                continue
            D = -1 if not TRI or u0 < ts else (u0 - ts) // 32  # the chunk kind (0 / 1: diagonal chunks)
            assert D in (-1, 0, 1)
            m0 = 0 if D < 0 else 4 * D + 3  # B fragments below m0 are not loaded (NaN here)
            bfr = np.array([[tp[role * 64 + 8 * (m - 3) + (l >> 2) - (l & 3) + KU - 1] if m >= m0 else (np.nan,) * 2
                             for m in range(11)] for l in range(32)])
            for s in range(KU // 8):
                for mt in range(1 if u0 < mt0_from else 0, 2):
                    afr = np.array([a[((s * 2 + mt) * 32 + l) * 4:][:4] for l in range(32)])
                    for j in range(0 if D < 0 else 4 * D + s, 8):
                        _mma(acc[role, :, mt, j], afr, bfr[:, j - s + 3])

    if FOLD:
        return _folded_grid(k, eps, REV, chunk)
    return _toeplitz_grid(k, eps, REV, lambda c, t0, b0, u0, acc: chunk(c, t0, _batch_rows(b0, B), u0, acc))


def _batch_rows(b0, B):
    """BatchRows: local row lr is b0 + lr at the block's times."""
    return lambda lr: (b0 + lr, 0) if b0 + lr < B else None


def _mma16(acc, a, b):
    """mma.m16n8k16 .row.col f32.bf16 / f16: acc[32][4] += A(a[32][4][2]) @ B(b[32][2][2]), PTX's fragment maps
    (register r of a lane holds two elements, [0] the low half: the lower column of A, the lower row k of B)."""
    A, Bm, Cm = np.zeros((16, 16)), np.zeros((16, 8)), np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for h in range(2):
            A[g, 2 * t + h], A[g + 8, 2 * t + h] = a[lane][0][h], a[lane][1][h]
            A[g, 2 * t + 8 + h], A[g + 8, 2 * t + 8 + h] = a[lane][2][h], a[lane][3][h]
            Bm[2 * t + h, g], Bm[2 * t + 8 + h, g] = b[lane][0][h], b[lane][1][h]
        Cm[g, 2 * t], Cm[g, 2 * t + 1], Cm[g + 8, 2 * t], Cm[g + 8, 2 * t + 1] = acc[lane]
    Cm += A @ Bm
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        acc[lane] = [Cm[g, 2 * t], Cm[g, 2 * t + 1], Cm[g + 8, 2 * t], Cm[g + 8, 2 * t + 1]]


def _ldmatrix_x4(smem, addr):
    """ldmatrix.x4 .b16: addr[lane] the element offset of the row lane gives (matrix lane/8, row lane%8);
    returns [lane][register i][2]: row l/4, elements 2(l%4), +1 of matrix i."""
    rows = [smem[addr[lane]:addr[lane] + 8] for lane in range(32)]
    return [[rows[8 * i + (l >> 2)][2 * (l & 3):2 * (l & 3) + 2] for i in range(4)] for l in range(32)]


def mma16(w, k, eps, REV, vec=False):
    """timex_mma16<Product, E, Loads>: [b][u] k tile of rows 72 staged by 8-element pieces (vec: one 16-byte
    load, reversed for grad_k; else 8 scalars), A fragments by ldmatrix.x4, the tap-pair windows in a ring of 512
    pairs stored twice (the first window filled whole, then 64 new pairs a chunk, written here before the chunk
    before reads them, as a fast warp may), warp w on slice w, 64-u chunks with the diagonal chunk's tiles j < 2s
    skipped, m16n8k16 fragment maps, the epilogue's 16-byte stores through shared memory when T % 8 == 0."""
    B, C, T = k.shape
    BM, TN, KU, KS = 32, 256, 64, 72
    QOFF, NQ, RING = KU - 10, TN + KU - 10, 512
    assert not vec or T % 8 == 0
    tap = lambda c, d: w[c, T - 1 - d] if 0 <= d < T else 0.0
    pair = lambda c, d: [[tap(c, d), tap(c, d - 1)], [tap(c, d - 8), tap(c, d - 9)]]  # noqa: E731

    def ring_stage(ring, c, t0, u0):
        """Chunk u0's 64 new pairs: thread x stores pair d = t0 - u0 - QOFF + x % 64 in copy x / 64."""
        for x in range(128):
            d = t0 - u0 + (x & 63) - QOFF
            ring[(d & (RING - 1)) + (x >> 6) * RING] = pair(c, d)

    def chunk(c, t0, b0, u0, acc, ring):
        ka = np.full(BM * KS, np.nan)  # padding stays NaN: a read of it poisons the sums
        for x in range(128):
            pr, pu = x >> 3, 8 * (x & 7)
            for q in range(BM * KU // 8 // 128):
                b, u = b0 + pr + 16 * q, u0 + pu
                if vec:
                    piece = np.zeros(8)
                    if b < B and u < T:
                        piece = k[b, c, T - 8 - u:T - u][::-1] if REV else k[b, c, u:u + 8]
                else:
                    piece = [k[b, c, T - 1 - u - e if REV else u + e] if (b < B and u + e < T) else 0.0
                             for e in range(8)]
                ka[(pr + 16 * q) * KS + pu:][:8] = piece
        tq = ring[((t0 - u0 - QOFF) & (RING - 1)):]  # the window: pair i at its start + i
        for warp in range(4):
            ts = t0 + warp * 64
            if not (ts < T and u0 <= ts):
                continue
            diag = u0 == ts
            for s in range(4):
                bfr = {}
                for m in range(0 if diag else -6, 8):
                    bfr[m] = [tq[warp * 64 + (l >> 2) - 2 * (l & 3) + QOFF + 8 * m] for l in range(32)]
                for mt in range(2):
                    addr = [((l & 7) + 8 * ((l >> 3) & 1)) * KS + 8 * (l >> 4) + 16 * KS * mt + 16 * s
                            for l in range(32)]
                    afr = _ldmatrix_x4(ka, addr)
                    for j in range(2 * s if diag else 0, 8):
                        _mma16(acc[warp, :, mt, j], afr, bfr[j - 2 * s])

    out = np.full((B, C, T), np.nan)
    for c, t0, b0 in _toeplitz_blocks(B, C, T):  # (BM, TN: the TF32 kernels' block)
        acc = np.zeros((4, 32, 2, 8, 4))
        ring = np.full((2 * RING, 2, 2), np.nan)
        nchunks = (min(t0 + TN, T) + KU - 1) // KU
        ring_stage(ring, c, t0, 0)
        for x in range(128):  # the rest of the first window, both copies
            for i in range(KU + x, NQ, 128):
                d = t0 - QOFF + i
                ring[d & (RING - 1)] = ring[(d & (RING - 1)) + RING] = pair(c, d)
        for ch in range(nchunks):
            if ch + 1 < nchunks:
                ring_stage(ring, c, t0, (ch + 1) * KU)
            chunk(c, t0, b0, ch * KU, acc, ring)
        if T % 8 == 0:
            _store16(out, acc, b0, t0, c, eps, REV)
        else:
            _store(out, acc, _batch_rows(b0, B), t0, c, eps, REV)
    return out


def _store16(out, acc, b0, t0, c, eps, REV, KS=72):
    """timex_mma16's epilogue for T % 8 == 0: each warp's m-tile (16 rows x 64 t) to a shared tile of rows KS by
    the fragments' pairs, then 8-element pieces (lane: row 4 it + lane/8, piece lane%8) to out, reversed for grad_k."""
    B, C, T = out.shape
    for warp in range(4):
        ts = t0 + 64 * warp
        for mt in range(2):
            tile = np.full(16 * KS, np.nan)
            for lane in range(32):
                grp, tig = lane >> 2, lane & 3
                for j in range(8):
                    tile[grp * KS + 8 * j + 2 * tig:][:2] = acc[warp, lane, mt, j, 0:2] + eps
                    tile[(grp + 8) * KS + 8 * j + 2 * tig:][:2] = acc[warp, lane, mt, j, 2:4] + eps
            for it in range(4):
                for lane in range(32):
                    r, t = 4 * it + (lane >> 3), ts + 8 * (lane & 7)
                    b = b0 + 16 * mt + r
                    v = tile[r * KS + 8 * (lane & 7):][:8]
                    if b < B and t < T:
                        if REV:
                            out[b, c, T - 8 - t:T - t] = v[::-1]
                        else:
                            out[b, c, t:t + 8] = v


def _store(out, acc, rows, t0, c, eps, REV):
    """The Toeplitz kernels' epilogue: acc[slice][lane][mt][j][x] to out (bounds-checked); rows(lr): (b, shift)
    of local row lr, or None past the rows."""
    B, C, T = out.shape
    for sl in range(4):
        for lane in range(32):
            grp, tig = lane >> 2, lane & 3
            for mt in range(2):
                for j in range(8):
                    for x in range(4):
                        at = rows(16 * mt + grp + (8 if x >= 2 else 0))
                        t = t0 - (at[1] if at else 0) + sl * 64 + 8 * j + 2 * tig + (x & 1)
                        if at and t < T:
                            out[at[0], c, T - 1 - t if REV else t] = acc[sl, lane, mt, j, x] + eps


def band_block(bid, C, npair, NB, group):
    """timex_band_block: block bid's channel and first band (channels in groups, each group's long bands first)."""
    grp_ = bid // (group * npair)
    gsz = min(group, C - grp_ * group)
    r_in = bid - grp_ * group * npair
    return grp_ * group + r_in % gsz, (r_in // gsz) * NB


def grad_w_frag(k, g, NB=2, group=16):
    """timex_grad_w_frag<NB, Loads> + timex_grad_w_bands: band GEMMs with fragment-order staging (row pairs,
    per-thread (b, p) counters), NB bands per block, diagonal sums per band into the workspace, then the
    two-band combine (exact products)."""
    B, C, T = k.shape
    TB, KC, KP, SE = 64, 16, 8, 65
    SA, SB = 2 * TB + 8, 2 * TB * NB + 8
    nt = -(-T // TB)
    npair = -(-nt // NB)
    ws = np.full((C, nt, 2 * TB), np.nan)
    for bid in range(C * npair):
        c, band0 = band_block(bid, C, npair, NB, group)
        np_ = nt - band0
        nchunks = -(-(B * np_) // KC)
        ctr = {tid: [[(2 * (tid >> 4) + h) // np_, (2 * (tid >> 4) + h) % np_] for h in range(2)]
               for tid in range(THREADS)}
        acc = np.zeros((4, 32, 2, 4 * NB, 4))
        for ch in range(nchunks):
            ahi, bhi = np.full(KP * SA, np.nan), np.full(KP * SB, np.nan)
            for tid in range(THREADS):
                kp, col = tid >> 4, tid & 15
                vals = []
                for h in range(2):
                    b, p = ctr[tid][h]
                    kr = [k[b, c, p * TB + t] if b < B and p * TB + t < T else 0.0 for t in range(TB)]
                    gr = [g[b, c, band0 * TB + p * TB + t] if b < B and band0 * TB + p * TB + t < T else 0.0
                          for t in range(TB * NB)]
                    vals.append((kr, gr))
                    p += KC
                    while p >= np_:
                        p -= np_
                        b += 1
                    ctr[tid][h] = [b, p]
                for s in range(TB // 2 // 16):
                    i = 2 * (col + 16 * s)
                    o = kp * SA + 4 * (col + 16 * s)
                    ahi[o: o + 4] = [vals[0][0][i], vals[0][0][i + 1], vals[1][0][i], vals[1][0][i + 1]]
                for s in range(TB * NB // 2 // 16):
                    j = 2 * (col + 16 * s)
                    o = kp * SB + 4 * (col + 16 * s)
                    bhi[o: o + 4] = [vals[0][1][j], vals[1][1][j], vals[0][1][j + 1], vals[1][1][j + 1]]
            for warp in range(4):
                wm, wn = warp >> 1, warp & 1
                for st in range(KC // 8):
                    af, bf = np.zeros((32, 2, 4)), np.zeros((32, 4 * NB, 2))
                    for lane in range(32):
                        grp, tig = lane >> 2, lane & 3
                        q = 4 * st + tig
                        for mt in range(2):
                            o = q * SA + 4 * (8 * (2 * wm + mt) + grp)
                            af[lane, mt] = ahi[o: o + 4]
                        for n in range(4 * NB):
                            o = q * SB + 4 * (16 * NB * wn + 8 * (n // 2) + grp) + 2 * (n % 2)
                            bf[lane, n] = bhi[o: o + 2]
                    for mt in range(2):
                        for n in range(4 * NB):
                            _mma(acc[warp, :, mt, n], af[:, mt], bf[:, n])
        at = np.full(NB * TB * SE, np.nan)
        for warp in range(4):
            wm, wn = warp >> 1, warp & 1
            for lane in range(32):
                grp, tig = lane >> 2, lane & 3
                for mt in range(2):
                    for n in range(4 * NB):
                        for x in range(4):
                            i = 16 * (2 * wm + mt) + 2 * grp + (x >> 1)
                            j = 32 * NB * wn + 16 * (n // 2) + 4 * tig + 2 * (x & 1) + n % 2
                            at[(j // TB) * TB * SE + i * SE + j % TB] = acc[warp, lane, mt, n, x]
        _band_diagonals(at, ws, c, band0, nt, NB, TB, SE)
    return _combine_bands(ws, C, T, TB, nt)


def _ldmatrix_x4_trans(smem, addr):
    """ldmatrix.x4.trans .b16: as _ldmatrix_x4, but register i of lane l holds (row 2(l%4), column l/4) and
    (row 2(l%4)+1, column l/4) of matrix i."""
    rows = [smem[addr[lane]:addr[lane] + 8] for lane in range(32)]
    return [[[rows[8 * i + 2 * (l & 3) + h][l >> 2] for h in range(2)] for i in range(4)] for l in range(32)]


def grad_w_mma16(k, g, vec=False, group=16):
    """timex_grad_w_mma16<E, Loads> + timex_grad_w_bands: two bands a block, K rows staged as in global memory
    (thread x: row x/4, its (b, p) counter; k at 16(x%4).., g at 32(x%4)..), A and B fragments by ldmatrix.x4.trans,
    m16n8k16 fragment maps, the diagonal sums into the workspace, the two-band combine."""
    B, C, T = k.shape
    TB, KC, SE, NB = 64, 32, 65, 2
    SA, SB = TB + 8, NB * TB + 8
    assert not vec or T % 8 == 0
    nt = -(-T // TB)
    npair = -(-nt // NB)
    ws = np.full((C, nt, 2 * TB), np.nan)
    for bid in range(C * npair):
        c, band0 = band_block(bid, C, npair, NB, group)
        np_ = nt - band0
        glim = T - band0 * TB
        nchunks = -(-(B * np_) // KC)
        ctr = {tid: [(tid >> 2) // np_, (tid >> 2) % np_] for tid in range(THREADS)}
        acc = np.zeros((4, 32, 2, 8, 4))

        def load8(row, t, lim):  # row(t) for t < lim, else 0; vec: the piece wholly in or out
            if vec:
                return [row(t + e) for e in range(8)] if t < lim else [0.0] * 8
            return [row(t + e) if t + e < lim else 0.0 for e in range(8)]

        for ch in range(nchunks):
            sa, sg = np.full(KC * SA, np.nan), np.full(KC * SB, np.nan)
            for tid in range(THREADS):
                sr, sq = tid >> 2, tid & 3
                b, p = ctr[tid]
                ok = b < B
                klim, gl = (T - p * TB, glim - p * TB) if ok else (0, 0)
                krow = lambda t, b=b, p=p: k[b, c, p * TB + t]  # noqa: E731
                grow = lambda t, b=b, p=p: g[b, c, band0 * TB + p * TB + t]  # noqa: E731
                for s_ in range(2):
                    o = sr * SA + 16 * sq + 8 * s_
                    sa[o:o + 8] = load8(krow, 16 * sq + 8 * s_, klim)
                for s_ in range(4):
                    o = sr * SB + 32 * sq + 8 * s_
                    sg[o:o + 8] = load8(grow, 32 * sq + 8 * s_, gl)
                p += KC
                if p >= np_:
                    b, p = b + p // np_, p % np_
                ctr[tid] = [b, p]
            for warp in range(4):
                wm, wn = warp >> 1, warp & 1
                arow = [((l & 7) + 8 * (l >> 4)) * SA + 32 * wm + 8 * ((l >> 3) & 1) for l in range(32)]
                brow = [((l & 7) + 8 * ((l >> 3) & 1)) * SB + 64 * wn + 8 * (l >> 4) for l in range(32)]
                for st in range(KC // 16):
                    af = [_ldmatrix_x4_trans(sa, [a + 16 * st * SA + 16 * mt for a in arow]) for mt in range(2)]
                    bf = [_ldmatrix_x4_trans(sg, [a + 16 * st * SB + 16 * p for a in brow]) for p in range(4)]
                    for mt in range(2):
                        for n in range(8):
                            bn = [[bf[n // 2][l][2 * (n % 2)], bf[n // 2][l][2 * (n % 2) + 1]] for l in range(32)]
                            _mma16(acc[warp, :, mt, n], af[mt], bn)
        at = np.full(NB * TB * SE, np.nan)
        for warp in range(4):
            wm, wn = warp >> 1, warp & 1
            for lane in range(32):
                grp, tig = lane >> 2, lane & 3
                for mt in range(2):
                    for n in range(8):
                        for x in range(4):
                            i = 32 * wm + 16 * mt + grp + 8 * (x >> 1)
                            j = 8 * n + 2 * tig + (x & 1)
                            at[wn * TB * SE + i * SE + j] = acc[warp, lane, mt, n, x]
        _band_diagonals(at, ws, c, band0, nt, NB, TB, SE)
    return _combine_bands(ws, C, T, TB, nt)


def _band_diagonals(at, ws, c, band0, nt, NB, TB, SE):
    """timex_band_diagonals: thread tid sums diagonal tid - (TB - 1) of each of the block's NB band tiles."""
    for tid in range(2 * TB - 1):
        e = tid - (TB - 1)
        for bb in range(NB):
            if band0 + bb < nt:
                ws[c, band0 + bb, tid] = sum(at[bb * TB * SE + i * SE + i + e]
                                             for i in range(max(0, -e), min(TB, TB - e)))


def _combine_bands(ws, C, T, TB, nt):
    """timex_grad_w_bands: lag d = 64L + r is diagonal r of band L plus diagonal r - 64 of band L+1."""
    gw = np.full((C, T), np.nan)
    for c in range(C):
        for jj in range(T):
            d = T - 1 - jj
            L, r = divmod(d, TB)
            s = ws[c, L, TB - 1 + r]
            if r > 0 and L + 1 < nt:
                s += ws[c, L + 1, r - 1]
            gw[c, jj] = s
    return gw
